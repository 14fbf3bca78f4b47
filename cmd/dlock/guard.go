package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The guard is dlock's own binary (dlock-guard in ps) between dlock and the
// command: the command's parent, in dlock's process group, so that the
// shell's job control acts on dlock, the guard and the command as one job,
// as with flock(1). On Linux it is the subreaper of the command's
// processes, so that every one of them stays below it whatever group or
// session it moves to, and it exits once none is left: dlock holds the
// lock until then. It kills them all when dlock dies, even by SIGKILL (it
// sees dlock's end of a pipe close), and at the lease's deadline, which
// dlock writes to a file they share at each renewal, should dlock stop
// renewing (SIGSTOP, ^Z) without dying. Job control does not stop it. It
// passes on the signals dlock gets (relay), and tells dlock when the main
// process exits.
type guard struct {
	pipe     *os.File      // the write end; the guard reads the other
	child    *os.File      // the read end, dlock's copy until the guard has started
	reports  *os.File      // the read end of the guard's reports
	report   *os.File      // its write end, dlock's copy until the guard has started
	lease    *os.File      // the deadline file, shared with the guard
	deadline time.Time     // the last one written
	stop     chan struct{} // ends follow's goroutine
	stopped  chan struct{} // closed once it has ended
	said     chan string   // the guard's reports: "exited N", "expired", "done N"
	passed   []*os.File    // dlock's inherited descriptors, kept from the collector's close
	unblock  []int         // those of them non-blocking, which exec makes blocking
}

// heldEnv, set in the environment of a command dlock starts, makes main run
// guardCommand: "hold" to wait for every process of the command, "release"
// (--release-on-exit) for its main process only; then the descriptor of
// dlock's words (its reports are on the next one, the deadline file on
// the one after); then "ttou-ignored" if dlock was started ignoring
// SIGTTOU, which the command then ignores too.
const heldEnv = "DLOCK_RUN_HELD"

// selfPath is dlock's own binary: on Linux, this very one, even if a newer
// dlock replaced its file while the run waited for the lock.
func selfPath() (string, error) {
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		return "/proc/self/exe", nil
	}
	return os.Executable()
}

// guardCmd makes cmd start as the guard of the command it was to run. The
// guard runs the command once told (run); if dlock dies first, it exits
// unrun.
func guardCmd(cmd *exec.Cmd, releaseOnExit, ttouIgnored bool) (*guard, error) {
	self, err := selfPath()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	reports, report, err := os.Pipe()
	if err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	lease, err := deadlineFile()
	if err != nil {
		r.Close()
		w.Close()
		reports.Close()
		report.Close()
		return nil, err
	}
	mode := "hold"
	if releaseOnExit {
		mode = "release"
	}
	cmd.Args = append([]string{"dlock-guard", cmd.Path}, cmd.Args...) // as ps -f shows it
	cmd.Path = self
	// Above the descriptors dlock inherited, which the command gets
	// unchanged (make's jobserver, socket activation), as flock passes them.
	passed, unblock := inheritedFiles()
	words := fmt.Sprintf("%s=%s %d", heldEnv, mode, 3+len(passed))
	if ttouIgnored {
		words += " ttou-ignored"
	}
	cmd.Env = append(cmd.Env, words)
	cmd.ExtraFiles = append(passed, r, report, lease)
	return &guard{pipe: w, child: r, reports: reports, report: report, lease: lease, said: make(chan string, 1),
		passed: passed, unblock: unblock}, nil
}

// deadlineFile is a file of dlock's and the guard's only (sharedFile):
// the guard reads the deadline there when its own comes, so a guard that
// was stopped meanwhile acts on the lease as it is, not as it was. Its
// bytes are written now, where a full disk fails the run before it starts.
func deadlineFile() (*os.File, error) {
	f, err := sharedFile()
	if err != nil {
		return nil, err
	}
	if err := writeDeadline(f, time.Time{}); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// tempFile is a file of the temp dir, removed at once.
func tempFile() (*os.File, error) {
	f, err := os.CreateTemp("", "dlock-run-")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name())
	return f, nil
}

// inheritedFiles are dlock's descriptors from 3 on that an exec keeps
// (dlock's own are close-on-exec), up to the last such, nil for a gap; up
// to 1024 only; and those of them that are non-blocking.
func inheritedFiles() (files []*os.File, nonBlocking []int) {
	last := 0
	for fd := 3; fd < 1024; fd++ {
		flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
		if errno != 0 || flags&syscall.FD_CLOEXEC != 0 {
			files = append(files, nil)
			continue
		}
		if fl, _, _ := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFL, 0); fl&syscall.O_NONBLOCK != 0 {
			nonBlocking = append(nonBlocking, fd)
		}
		files = append(files, os.NewFile(uintptr(fd), "inherited"))
		last = len(files)
	}
	return files[:last], nonBlocking
}

// started closes dlock's copies of the guard's ends, once cmd has started
// or failed to: the pipe then closes when dlock dies, and the reports when
// the guard does.
func (g *guard) started() {
	for _, fd := range g.unblock {
		_ = syscall.SetNonblock(fd, true) // as dlock's parent set it, which shares it
	}
	g.child.Close()
	g.report.Close()
	go func() {
		lines := bufio.NewScanner(g.reports)
		for lines.Scan() {
			g.said <- lines.Text()
		}
		close(g.said) // the guard has exited
	}()
}

// run tells the guard to run the command: dlock's first word, to a guard
// waiting for it.
func (g *guard) run() { g.say("run") }

// pass asks the guard to pass sig, which dlock got, on to every process of
// the command, unless the guard got it too (see relay).
func (g *guard) pass(sig syscall.Signal) { g.say(fmt.Sprintf("pass %d", int(sig))) }

// send has the guard send sig to every process of the command.
func (g *guard) send(sig syscall.Signal) { g.say(fmt.Sprintf("send %d", int(sig))) }

// say writes a word to the guard, whole or not at all (a pipe's write of
// up to PIPE_BUF bytes), given 100 ms: a guard stopped with its pipe full
// (kill -STOP) must not hold dlock back.
func (g *guard) say(word string) {
	_ = g.pipe.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = g.pipe.WriteString(word + "\n")
}

// tell writes the lease's deadline to the file the guard reads, if it
// moved: never blocked by a guard that is stopped.
func (g *guard) tell(deadline time.Time) {
	if !deadline.Equal(g.deadline) && writeDeadline(g.lease, deadline) == nil {
		g.deadline = deadline
	}
}

// follow tells the guard deadline() at once on each renewal (renewed)
// and every interval, on a goroutine of its own until close: dlock's
// output, which may block (a pipe nobody reads, ^S on a terminal), never
// holds it back. A renewal confirmed just before the old deadline reaches
// the guard before that deadline, not at the next tick after it.
func (g *guard) follow(deadline func() time.Time, every time.Duration, renewed <-chan struct{}) {
	g.tell(deadline())
	g.stop, g.stopped = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(g.stopped)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-renewed:
				g.tell(deadline())
			case <-tick.C:
				g.tell(deadline())
			}
		}
	}()
}

func (g *guard) close() {
	if g.stop != nil {
		close(g.stop)
		<-g.stopped
	}
	g.pipe.Close()
	g.reports.Close()
	g.lease.Close()
}

// writeDeadline writes deadline, in nanoseconds of bootClock, and its
// complement, by which readDeadline tells a torn read. Not the wall
// clock: a step of it while dlock is stopped would move the guard's kill.
func writeDeadline(f *os.File, deadline time.Time) error {
	var b [16]byte
	ns := uint64(0) // the zero time: past
	if !deadline.IsZero() {
		ns = uint64(bootClock() + int64(time.Until(deadline)))
	}
	binary.LittleEndian.PutUint64(b[:8], ns)
	binary.LittleEndian.PutUint64(b[8:], ^ns)
	_, err := f.WriteAt(b[:], 0)
	return err
}

// untilDeadline is the time left until the deadline dlock last wrote;
// none if it cannot be read.
func untilDeadline(f *os.File) time.Duration {
	var b [16]byte
	for range 100 { // a read that met a write is read again
		if n, _ := f.ReadAt(b[:], 0); n < len(b) {
			break
		}
		if ns := binary.LittleEndian.Uint64(b[:8]); ^ns == binary.LittleEndian.Uint64(b[8:]) {
			return time.Duration(int64(ns) - bootClock())
		}
	}
	return 0
}

// guardCommand is the guard's life: os.Args holds the command's path, then
// its arguments; dlock's words come on the descriptor heldEnv names, and
// its reports go to the next. It exits with the command's exit code (128+N
// for signal N).
func guardCommand() int {
	// ^C, ^\, a kill 0 of the command's, and what dlock passes on reach
	// the guard: they are the command's to act on.
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	nameProcess("dlock-guard")
	fd := 3
	words := strings.Fields(os.Getenv(heldEnv))
	if len(words) > 1 {
		fd, _ = strconv.Atoi(words[1])
	}
	syscall.CloseOnExec(fd) // dlock's word is not the command's
	syscall.CloseOnExec(fd + 1)
	syscall.CloseOnExec(fd + 2)
	said := make(chan string)
	go func() {
		lines := bufio.NewScanner(os.NewFile(uintptr(fd), "dlock"))
		for lines.Scan() {
			said <- lines.Text()
		}
		close(said) // dlock has died, or exited after the guard
	}()
	for word := range said {
		if word == "run" {
			reports := os.NewFile(uintptr(fd+1), "reports")
			code := superviseCommand(said, reports, os.NewFile(uintptr(fd+2), "deadline"), signals)
			fmt.Fprintln(reports, "done", code) // a crash exits 2 too: dlock kills after any other end
			return code
		}
	}
	return exitCannotRun // dlock died before the command started
}

// superviseCommand runs the command and acts on dlock's words until every
// process of it has ended (only the main one with --release-on-exit).
func superviseCommand(words <-chan string, reports, lease *os.File, signals <-chan os.Signal) int {
	// With --release-on-exit too: the processes the command leaves are
	// then killed with it on a loss, until its main process exits.
	becomeSubreaper()
	hold := strings.HasPrefix(os.Getenv(heldEnv), "hold")
	cmd := &exec.Cmd{Path: os.Args[1], Args: os.Args[2:], Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Env: slices.DeleteFunc(os.Environ(), func(v string) bool { return strings.HasPrefix(v, heldEnv+"=") })}
	// The kernel sends SIGTTIN or SIGTTOU to the whole group when one of
	// its processes uses the terminal in the background (stty: always),
	// maybe at once. dlock ignores SIGTTOU, so the shell, which waits on
	// dlock alone, sees the job Running and its fg sends no SIGCONT: the
	// guard does, once the group has the terminal. Caught from before the
	// start, never ignored, lest the guard stop; the command gets the
	// default back at exec, or keeps SIGTTOU ignored as dlock's parent
	// had it (it is caught only after the start then). SIGTSTP is caught
	// until it is ignored below.
	ttys := make(chan os.Signal, 1)
	signal.Notify(ttys, syscall.SIGTTIN)
	if !slices.Contains(strings.Fields(os.Getenv(heldEnv)), "ttou-ignored") {
		signal.Notify(ttys, syscall.SIGTTOU)
	}
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTSTP)
	if err := cmd.Start(); err != nil {
		signal.Ignore(syscall.SIGTTOU) // caught, a write under tostop is retried for ever
		fmt.Fprintf(os.Stderr, "dlock run: %s\n", startError(err))
		if errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	// Once the command has started, which would inherit them: a guard
	// stopped by ^Z, by using the terminal in the background, or killed
	// by writing to a closed pipe, could not kill at the deadline.
	signal.Ignore(syscall.SIGTSTP, syscall.SIGPIPE)
	signal.Notify(ttys, syscall.SIGTTOU)
	var polls *time.Ticker
	var fg <-chan time.Time // polled from a SIGTTIN or SIGTTOU on until fg
	relay := newRelay()
	ended := make(chan int)
	go func() { ended <- reap(cmd.Process.Pid, hold, reports) }()
	expiry := time.NewTimer(untilDeadline(lease))
	for {
		select {
		case code := <-ended:
			return code
		case <-ttys:
			if fg == nil {
				polls = time.NewTicker(50 * time.Millisecond)
				fg = polls.C
			}
		case <-fg:
			if foreground, tty := terminalForeground(); foreground || !tty {
				polls.Stop()
				fg = nil
				continueGroup(cmd.Process)
			}
		case word, ok := <-words:
			if ok {
				relay.word(cmd.Process, word)
			} else { // dlock died, or lost the lock (elsewhere than Linux)
				words = nil
				if unkilled := killAll(cmd.Process, nil); len(unkilled) > 0 {
					signal.Ignore(syscall.SIGTTOU) // caught, a write under tostop is retried for ever
					fmt.Fprintf(os.Stderr, "dlock run: dlock died; %s\n", killedText(unkilled))
				}
			}
		case sig := <-signals:
			relay.got(cmd.Process, sig.(syscall.Signal))
			if fg != nil {
				// Stopped for the terminal, the job shows Running: the
				// shell's kill sends no SIGCONT, as it would to a job it
				// knew stopped. The guard does, for the signal to act.
				continueGroup(cmd.Process)
			}
		case sig := <-relay.late:
			relay.unmatched(cmd.Process, sig)
		case <-expiry.C:
			// Read again: dlock has moved it since at each renewal, and
			// the guard may have been stopped past it meanwhile.
			if left := untilDeadline(lease); left > 0 {
				expiry.Reset(left)
				continue
			}
			// dlock may have been stopped, or Redis unreachable: the guard
			// knows only that no renewal came. dlock, told, says the loss
			// once it runs, and exits 76; the guard says it only if dlock
			// cannot be told.
			unkilled := killAll(cmd.Process, nil)
			if _, err := fmt.Fprintln(reports, "expired"); err != nil {
				signal.Ignore(syscall.SIGTTOU)
				fmt.Fprintf(os.Stderr, "dlock run: the lock was not renewed by its deadline; %s\n", killedText(unkilled))
			}
		}
	}
}

// reap reaps the guard's children as they end, the orphans of the
// command's processes among them, until none is left (only the main one,
// main, with --release-on-exit), and returns main's exit code. It tells
// dlock when main exits.
func reap(main int, hold bool, reports *os.File) int {
	code := exitCannotRun
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return code // no child left
		}
		if pid == main {
			code = statusCode(status)
			if !hold {
				return code
			}
			fmt.Fprintln(reports, "exited", code)
		}
	}
}

// relay passes on to the command's processes the signals dlock and the
// guard get, each once. Sent to the job's group (^C, kill %1, timeout(1),
// a closing terminal's SIGHUP), a signal reaches the command, dlock and
// the guard from the kernel, the guard's copy queued before dlock can
// act: the guard passes it on only out of the group, and dlock's word
// for it finds the guard's copy. Sent to dlock alone (docker stop, kill
// PID), it reaches no process of the command: dlock's word, unmatched
// within relayWait, passes it on to all. Each word and each copy is
// matched once at most. A copy the guard got alone (pkill dlock,
// matching dlock-guard too) is taken for the group's, for relayKeep. A
// word left unmatched within relayWait of a match is taken for the same
// signal, as the kernel merges a pending one: timeout(1) kills dlock,
// then its group.
type relay struct {
	copies  map[syscall.Signal][]time.Time // the guard's, not yet matched by a word
	words   map[syscall.Signal][]time.Time // dlock's "pass N", not yet matched
	matched map[syscall.Signal]time.Time   // the last match of a copy and a word
	late    chan syscall.Signal            // a word's relayWait has passed
}

// relayWait is how long a word of dlock's waits for the guard's copy of
// its signal: both come from one kill(2), the copy first but for the
// scheduler's whims. A copy waits for a word up to relayKeep, no more:
// one the guard got alone must not match a word of a later signal.
const relayWait, relayKeep = 250 * time.Millisecond, 500 * time.Millisecond

func newRelay() *relay {
	return &relay{copies: map[syscall.Signal][]time.Time{}, words: map[syscall.Signal][]time.Time{},
		matched: map[syscall.Signal]time.Time{}, late: make(chan syscall.Signal, 16)}
}

// got acts on the guard's own copy of sig.
func (r *relay) got(main *os.Process, sig syscall.Signal) {
	passOn(main, sig, false)
	if len(r.words[sig]) > 0 {
		r.words[sig], r.matched[sig] = r.words[sig][1:], time.Now()
		return
	}
	r.copies[sig] = append(r.copies[sig], time.Now())
}

// word acts on dlock's word: "pass N" or "send N".
func (r *relay) word(main *os.Process, word string) {
	verb, number, _ := strings.Cut(word, " ")
	n, err := strconv.Atoi(number)
	sig := syscall.Signal(n)
	switch {
	case err != nil || n <= 0:
	case verb == "send":
		passOn(main, sig, true)
	case verb == "pass":
		copies := slices.DeleteFunc(r.copies[sig], func(at time.Time) bool { return time.Since(at) > relayKeep })
		if len(copies) > 0 {
			r.copies[sig], r.matched[sig] = copies[1:], time.Now()
			return
		}
		r.copies[sig] = copies
		r.words[sig] = append(r.words[sig], time.Now())
		time.AfterFunc(relayWait, func() { r.late <- sig })
	}
}

// unmatched passes sig on to every process of the command if its oldest
// word is unmatched after relayWait, unless a match came within
// relayWait of that word: dlock alone got it.
func (r *relay) unmatched(main *os.Process, sig syscall.Signal) {
	words := r.words[sig]
	if len(words) == 0 || time.Since(words[0]) < relayWait {
		return // matched meanwhile, or the next word's wait is not over
	}
	r.words[sig] = words[1:]
	if !r.matched[sig].After(words[0].Add(-relayWait)) {
		passOn(main, sig, true)
	}
}

// passOn passes sig on to every process of the command (only to those
// out of the guard's group unless all), and SIGCONT after it: one stopped
// (a ^Z of the job, whose fg has yet to come, or kill -STOP) would not
// act on it until continued.
func passOn(main *os.Process, sig syscall.Signal, all bool) {
	group := syscall.Getpgrp()
	for _, pid := range commandProcesses(main, nil) {
		if pgid, err := syscall.Getpgid(pid); all || err == nil && pgid != group {
			_ = syscall.Kill(pid, sig)
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

// continueGroup continues the processes of the command in the guard's
// group, as the shell's fg of a stopped job does: SIGCONT to one running
// does nothing, and discards a stop still pending.
func continueGroup(main *os.Process) {
	group := syscall.Getpgrp()
	for _, pid := range commandProcesses(main, nil) {
		if pgid, err := syscall.Getpgid(pid); err == nil && pgid == group {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

// startError is why the command did not start, its name escaped and its
// middle cut when long: the name is the caller's, and may hold control
// characters or be huge.
func startError(err error) string {
	text := cannotRun(err)
	if len(text) > 300 {
		text = clip(text, 200) + "…" + text[len(text)-80:]
	}
	return printable(text)
}
