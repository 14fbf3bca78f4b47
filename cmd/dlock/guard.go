package main

import (
	"bufio"
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
// command: the command's parent, in its process group. On Linux it is the
// subreaper of the command's processes, so that every one of them stays
// below it whatever group or session it moves to, and it exits once none
// is left: dlock holds the lock until then. It kills them all when dlock
// dies, even by SIGKILL (it sees dlock's end of a pipe close), and at the
// lease's deadline, which dlock tells it at each renewal, should dlock stop
// renewing (SIGSTOP, ^Z) without dying. Job control does not stop it. It
// tells dlock when the command's main process stops or exits.
type guard struct {
	pipe     *os.File    // the write end; the guard reads the other
	child    *os.File    // the read end, dlock's copy until the guard has started
	reports  *os.File    // the read end of the guard's reports
	report   *os.File    // its write end, dlock's copy until the guard has started
	deadline time.Time   // the last one told
	said     chan string // the guard's reports: "stopped", "exited N"
	passed   []*os.File  // dlock's inherited descriptors, kept from the collector's close
	unblock  []int       // those of them non-blocking, which exec makes blocking
}

// heldEnv, set in the environment of a command dlock starts, makes main run
// guardCommand: "hold" to wait for every process of the command, "release"
// (--release-on-exit) for its main process only; then the descriptor of
// dlock's words (its reports are on the next one).
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
func guardCmd(cmd *exec.Cmd, releaseOnExit bool) (*guard, error) {
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
	mode := "hold"
	if releaseOnExit {
		mode = "release"
	}
	cmd.Args = append([]string{"dlock-guard", cmd.Path}, cmd.Args...) // as ps -f shows it
	cmd.Path = self
	// Above the descriptors dlock inherited, which the command gets
	// unchanged (make's jobserver, socket activation), as flock passes them.
	passed, unblock := inheritedFiles()
	cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%s %d", heldEnv, mode, 3+len(passed)))
	cmd.ExtraFiles = append(passed, r, report)
	return &guard{pipe: w, child: r, reports: reports, report: report, said: make(chan string, 1),
		passed: passed, unblock: unblock}, nil
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
	}()
}

func (g *guard) run() { g.send("run") }

// tell gives the guard the lease's deadline, if it moved. A word the pipe
// has no room for is told again at the next tick.
func (g *guard) tell(deadline time.Time) {
	if !deadline.Equal(g.deadline) && g.send("deadline "+strconv.FormatInt(deadline.UnixNano(), 10)) {
		g.deadline = deadline
	}
}

// send writes a word, unless the pipe is full: a guard stopped (kill
// -STOP) reads nothing, and dlock, blocked writing, would no longer act on
// a loss or a signal. Once the guard has exited, nobody reads it. A word
// under PIPE_BUF bytes goes whole or not at all.
func (g *guard) send(line string) bool {
	conn, err := g.pipe.SyscallConn()
	if err != nil {
		return false
	}
	sent := false
	_ = conn.Write(func(fd uintptr) bool {
		n, err := syscall.Write(int(fd), []byte(line+"\n"))
		sent = err == nil && n == len(line)+1
		return true // never wait for room
	})
	return sent
}

func (g *guard) close() {
	g.pipe.Close()
	g.reports.Close()
}

// guardCommand is the guard's life: os.Args holds the command's path, then
// its arguments; dlock's words come on the descriptor heldEnv names, and
// its reports go to the next. It exits with the command's exit code (128+N
// for signal N).
func guardCommand() int {
	// The terminal's ^C, a kill 0 of the command's, and what dlock passes
	// on reach the guard too: they are the command's to act on.
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	nameProcess("dlock-guard")
	fd := 3
	if _, n, ok := strings.Cut(os.Getenv(heldEnv), " "); ok {
		fd, _ = strconv.Atoi(n)
	}
	syscall.CloseOnExec(fd) // dlock's word is not the command's
	syscall.CloseOnExec(fd + 1)
	words := make(chan string)
	go func() {
		lines := bufio.NewScanner(os.NewFile(uintptr(fd), "dlock"))
		for lines.Scan() {
			words <- lines.Text()
		}
		close(words) // dlock has died, or exited after the guard
	}()
	expiry := time.NewTimer(time.Hour)
	expiry.Stop()
	expire := func(word string) {
		if ns, err := strconv.ParseInt(strings.TrimPrefix(word, "deadline "), 10, 64); err == nil {
			expiry.Reset(time.Until(time.Unix(0, ns)))
		}
	}
	for word := range words {
		if word == "run" {
			return superviseCommand(words, os.NewFile(uintptr(fd+1), "reports"), signals, expiry, expire)
		}
		expire(word)
	}
	return exitCannotRun // dlock died before the command started
}

// superviseCommand runs the command and acts on dlock's words until every
// process of it has ended (only the main one with --release-on-exit).
func superviseCommand(words <-chan string, reports *os.File, signals <-chan os.Signal, expiry *time.Timer, expire func(string)) int {
	hold := strings.HasPrefix(os.Getenv(heldEnv), "hold")
	if hold {
		becomeSubreaper()
	}
	cmd := &exec.Cmd{Path: os.Args[1], Args: os.Args[2:], Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Env: slices.DeleteFunc(os.Environ(), func(v string) bool { return strings.HasPrefix(v, heldEnv+"=") })}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "dlock run: %s\n", startError(err))
		if errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	// Once the command has started, which would inherit them: a guard
	// stopped by ^Z or by writing to a terminal (stty tostop), or killed
	// by writing to a closed pipe, could not kill at the deadline.
	signal.Ignore(syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE)
	ended := make(chan int)
	go func() { ended <- reap(cmd.Process.Pid, hold, reports) }()
	group := os.Getpid()
	for {
		select {
		case code := <-ended:
			return code
		case word, ok := <-words:
			switch {
			case !ok: // dlock died
				words = nil
				killAll(group)
			default:
				expire(word)
			}
		case sig := <-signals:
			passOut(group, sig.(syscall.Signal))
		case <-expiry.C:
			killAll(group)
			fmt.Fprintln(os.Stderr, "dlock run: the lock's deadline passed and dlock did not renew it; killed the command")
		}
	}
}

// reap reaps the guard's children as they end, the orphans of the
// command's processes among them, until none is left (only the main one,
// main, with --release-on-exit), and returns main's exit code. It reports
// to dlock when main stops and when it exits.
func reap(main int, hold bool, reports *os.File) int {
	code := exitCannotRun
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WUNTRACED, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			break // no child left
		}
		if pid != main {
			continue
		}
		if status.Stopped() {
			fmt.Fprintln(reports, "stopped")
			continue
		}
		code = statusCode(status)
		if !hold {
			return code
		}
		fmt.Fprintln(reports, "exited", code)
	}
	waitForGroup()
	return code
}

// passOut passes sig, which reached the command's group, on to the
// processes of the command out of it (setsid): ^C, or a signal sent to
// dlock, reaches every process of the command. SIGCONT after it, as
// signalGroup does.
func passOut(group int, sig syscall.Signal) {
	for _, pid := range commandProcesses(group) {
		if pgid, err := syscall.Getpgid(pid); err == nil && pgid != group {
			_ = syscall.Kill(pid, sig)
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

// killAll kills every process of the command, in rounds: a process forked
// meanwhile comes up to the subreaper when its parent is killed. It
// returns once no process is left that it may kill.
func killAll(group int) {
	for signalAll(group, syscall.SIGKILL) > 0 {
		time.Sleep(time.Millisecond) // for the killed to become zombies
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
