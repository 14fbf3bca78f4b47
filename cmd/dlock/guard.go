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
)

// A guard is a second process of dlock's own binary that kills the
// command's process group when dlock dies, even by SIGKILL, so that no
// process of the command runs on without the lock. It learns of dlock's
// death from a pipe: the kernel closes dlock's end, however dlock ends.
// dlock writes "done" on it once the group is gone or let go.
type guard struct {
	pipe *os.File // the write end; the guard reads the other
}

// guardEnv, set in a guard's environment, makes main run guardGroup.
const guardEnv = "DLOCK_RUN_GUARD"

// selfPath is dlock's own binary: on Linux, this very one, even if a newer
// dlock replaced its file while the run waited for the lock.
func selfPath() (string, error) {
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		return "/proc/self/exe", nil
	}
	return os.Executable()
}

// startGuard starts a guard in a process group of its own, out of reach
// of the signals a shell sends dlock's job (kill -9 %1).
func startGuard() (*guard, error) {
	self, err := selfPath()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(self)
	cmd.Args[0] = "dlock-guard" // as ps shows it
	cmd.Env = []string{guardEnv + "=1"}
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	_ = cmd.Process.Release() // it exits on "done"; dlock exits soon after
	return &guard{pipe: w}, nil
}

// watch has the guard kill group pgid if dlock dies.
func (g *guard) watch(pgid int) { fmt.Fprintf(g.pipe, "watch %d\n", pgid) }

// release lets the guard go without killing anything: the group is gone,
// or let go (--release-on-exit). dlock, its members' reaper, finds it gone
// just after reaping the last, so its id is not reused meanwhile.
func (g *guard) release() {
	fmt.Fprintln(g.pipe, "done")
	g.pipe.Close()
}

// guardGroup is a guard's life: read what dlock writes on stdin, and kill
// the group it watches if the pipe closes without "done".
func guardGroup() int {
	// Only the pipe ends a guard: a terminal's hangup or ^C is dlock's to
	// handle, and dlock passes it on to the command.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	nameProcess("dlock-guard")
	pgid := 0
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		word, arg, _ := strings.Cut(lines.Text(), " ")
		switch word {
		case "done":
			return 0
		case "watch":
			pgid, _ = strconv.Atoi(arg)
		}
	}
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	return 0
}

// heldEnv, set in the environment of a command dlock starts, makes main run
// heldCommand: dlock's binary, in the command's process group, waits there
// until the guard knows that group, then execs the command. Started
// directly, the command could fork a child that a kill -9 of dlock in
// that moment would leave running without the lock.
const heldEnv = "DLOCK_RUN_HELD"

// holdCommand makes cmd start as heldCommand. Once cmd has started (or
// failed to), release lets it run; if dlock dies first, it exits unrun.
func holdCommand(cmd *exec.Cmd) (release func(), err error) {
	self, err := selfPath()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Args = append([]string{"dlock-run", cmd.Path}, cmd.Args...)
	cmd.Path = self
	cmd.Env = append(cmd.Env, heldEnv+"=1")
	cmd.ExtraFiles = []*os.File{r} // its descriptor 3
	return func() {
		r.Close()
		_, _ = w.Write([]byte{1})
		w.Close()
	}, nil
}

// heldCommand waits for dlock's word on descriptor 3, then execs the
// command: os.Args holds its path, then its arguments.
func heldCommand() int {
	held := os.NewFile(3, "held")
	if n, _ := held.Read(make([]byte, 1)); n != 1 {
		return exitCannotRun // dlock died before the guard knew the group
	}
	held.Close()
	env := slices.DeleteFunc(os.Environ(), func(v string) bool { return strings.HasPrefix(v, heldEnv+"=") })
	err := syscall.Exec(os.Args[1], os.Args[2:], env)
	fmt.Fprintf(os.Stderr, "dlock run: %v\n", &os.PathError{Op: "exec", Path: os.Args[1], Err: err})
	if errors.Is(err, syscall.ENOENT) {
		return exitNotFound
	}
	return exitCannotRun
}
