package main

import (
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"unsafe"
)

// controllingTerminal returns stdin's descriptor when it is dlock's
// controlling terminal, else -1; and whether dlock's group is its
// foreground. The command, in a group of its own, must then be given the
// terminal, as a shell gives it to a job, or reading it stops the command
// (SIGTTIN) and ^C reaches only dlock.
func controllingTerminal(stdin any) (fd int, foreground bool) {
	f, ok := stdin.(*os.File)
	if !ok {
		return -1, false
	}
	fd = int(f.Fd())
	pgrp, err := terminalGroup(fd)
	if err != nil {
		return -1, false
	}
	return fd, pgrp == syscall.Getpgrp()
}

func terminalGroup(fd int) (int, error) {
	var pgrp int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uintptr(syscall.TIOCGPGRP), uintptr(unsafe.Pointer(&pgrp))); errno != 0 {
		return 0, errno
	}
	return int(pgrp), nil
}

// takeTerminal makes dlock's group the terminal's foreground group again
// if the command's group has it: dlock gave it, in the foreground. SIGTTOU,
// which would stop dlock for asking, is ignored meanwhile, and after, so
// that a terminal set to stop background writers (stty tostop) lets dlock
// report.
func takeTerminal(fd, group int) {
	if fg, err := terminalGroup(fd); err == nil && fg == group {
		setForeground(fd, syscall.Getpgrp())
	}
}

// followForeground gives the terminal to the command's group whenever a
// shell continues dlock in the foreground (fg), and continues the command
// with dlock (fg, bg): the shell knows only dlock's group as the job. It
// returns the function that stops it.
func followForeground(tty, group int) (stop func()) {
	continued := make(chan os.Signal, 1)
	signal.Notify(continued, syscall.SIGCONT)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-continued:
				resume(tty, group)
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(continued); close(done) }
}

// resume continues the command, with the terminal if dlock's group has
// it.
func resume(tty, group int) {
	if fg, err := terminalGroup(tty); err == nil && fg == syscall.Getpgrp() {
		setForeground(tty, group)
	}
	_ = syscall.Kill(-group, syscall.SIGCONT)
}

// startCommand starts cmd in a process group of its own, in the terminal's
// foreground when dlock is (tty is not -1).
func startCommand(cmd *exec.Cmd, tty int, foreground bool) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if foreground {
		// The child puts itself in the foreground before it runs the
		// command, with its signals blocked, so SIGTTOU does not stop it.
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, tty
	}
	err := cmd.Start()
	if err == nil && tty >= 0 {
		signal.Ignore(syscall.SIGTTOU)
	}
	return err
}

// signalGroup sends sig to group pgid, and SIGCONT after it: a command
// stopped (by ^Z, or by reading a terminal it does not own) would
// otherwise not act on sig until someone continued it. The guard, in the
// group, passes it on to the processes that left the group.
func signalGroup(pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
	if sig != syscall.SIGKILL && sig != syscall.SIGCONT {
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
	}
}

// setForeground makes group pgid the terminal's foreground group.
func setForeground(tty, pgid int) {
	pgrp := int32(pgid)
	_, _, _ = syscall.Syscall(syscall.SYS_IOCTL, uintptr(tty), uintptr(syscall.TIOCSPGRP), uintptr(unsafe.Pointer(&pgrp)))
}
