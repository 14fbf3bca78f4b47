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
// dies, even by SIGKILL (it sees dlock's end of a pipe close), when dlock
// tells it the lock is lost, and at the lease's deadline, which dlock tells
// it at each renewal, should dlock stop renewing (SIGSTOP) without dying.
type guard struct {
	pipe     *os.File  // the write end; the guard reads the other
	child    *os.File  // the read end, dlock's copy until the guard has started
	deadline time.Time // the last one told
}

// heldEnv, set in the environment of a command dlock starts, makes main run
// guardCommand: "hold" to wait for every process of the command, "release"
// (--release-on-exit) for its main process only.
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
	mode := "hold"
	if releaseOnExit {
		mode = "release"
	}
	cmd.Args = append([]string{"dlock-guard", cmd.Path}, cmd.Args...) // as ps -f shows it
	cmd.Path = self
	cmd.Env = append(cmd.Env, heldEnv+"="+mode)
	cmd.ExtraFiles = []*os.File{r} // its descriptor 3
	return &guard{pipe: w, child: r}, nil
}

// started closes dlock's copy of the guard's end, once cmd has started or
// failed to: the pipe then closes when dlock dies.
func (g *guard) started() { g.child.Close() }

func (g *guard) run()  { g.send("run") }
func (g *guard) term() { g.send("term") }
func (g *guard) kill() { g.send("kill") }

// tell gives the guard the lease's deadline, if it moved.
func (g *guard) tell(deadline time.Time) {
	if !deadline.Equal(g.deadline) {
		g.deadline = deadline
		g.send("deadline " + strconv.FormatInt(deadline.UnixNano(), 10))
	}
}

// send writes a word; once the guard has exited, nobody reads it.
func (g *guard) send(line string) { _, _ = g.pipe.WriteString(line + "\n") }

func (g *guard) close() { g.pipe.Close() }

// guardCommand is the guard's life: os.Args holds the command's path, then
// its arguments; dlock's words come on descriptor 3. It exits with the
// command's exit code (128+N for signal N).
func guardCommand() int {
	// The terminal's ^C, a kill 0 of the command's, and what dlock passes
	// on reach the guard too: they are the command's to act on.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	nameProcess("dlock-guard")
	syscall.CloseOnExec(3) // dlock's word is not the command's
	words := make(chan string)
	go func() {
		lines := bufio.NewScanner(os.NewFile(3, "dlock"))
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
			return superviseCommand(words, expiry, expire)
		}
		expire(word)
	}
	return exitCannotRun // dlock died before the command started
}

// superviseCommand runs the command and acts on dlock's words until every
// process of it has ended (only the main one with --release-on-exit).
func superviseCommand(words <-chan string, expiry *time.Timer, expire func(string)) int {
	hold := os.Getenv(heldEnv) == "hold"
	if hold {
		becomeSubreaper()
	}
	cmd := &exec.Cmd{Path: os.Args[1], Args: os.Args[2:], Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Env: slices.DeleteFunc(os.Environ(), func(v string) bool { return strings.HasPrefix(v, heldEnv+"=") })}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "dlock run: %v\n", err)
		if errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	ended := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		if hold {
			reapAll()
			waitForGroup()
		}
		close(ended)
	}()
	for {
		select {
		case <-ended:
			return exitCode(cmd)
		case word, ok := <-words:
			switch {
			case !ok: // dlock died
				words = nil
				killAll()
			case word == "term":
				signalAll(syscall.SIGTERM)
				signalAll(syscall.SIGCONT) // a stopped process acts on it
			case word == "kill":
				killAll()
			default:
				expire(word)
			}
		case <-expiry.C:
			fmt.Fprintln(os.Stderr, "dlock run: the lock's deadline passed and dlock did not renew it; killing the command")
			killAll()
		}
	}
}

// reapAll reaps the guard's children, the orphans of the command's
// processes among them, until it has none: all have ended.
func reapAll() {
	for {
		var status syscall.WaitStatus
		if _, err := syscall.Wait4(-1, &status, 0, nil); err != nil && err != syscall.EINTR {
			return
		}
	}
}

// killAll kills every process of the command.
func killAll() {
	killBelow()
	signalOwnGroup(syscall.SIGKILL)
}

// signalAll sends sig to every process of the command.
func signalAll(sig syscall.Signal) {
	signalBelow(sig)
	signalOwnGroup(sig)
}

// killBelow kills every process below this one, in rounds: a process
// forked meanwhile comes up to this one, its subreaper, when its parent is
// killed. It returns once no process below is left that it may kill.
func killBelow() {
	for signalBelow(syscall.SIGKILL) > 0 {
		time.Sleep(time.Millisecond) // for the killed to become zombies
	}
}

// signalBelow sends sig to every process below this one, and returns to
// how many it did.
func signalBelow(sig syscall.Signal) int {
	n := 0
	for _, pid := range descendants(os.Getpid()) {
		if syscall.Kill(pid, sig) == nil {
			n++
		}
	}
	return n
}
