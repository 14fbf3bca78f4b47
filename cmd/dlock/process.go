package main

import (
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"unsafe"
)

// foregroundTerminal returns stdin's descriptor when it is a terminal whose
// foreground process group is dlock's: the command, which runs in a group
// of its own, must then be given the terminal, as a shell gives it to a job,
// or reading it stops the command (SIGTTIN) and ^C reaches only dlock.
// Else it returns -1.
func foregroundTerminal(stdin any) int {
	f, ok := stdin.(*os.File)
	if !ok {
		return -1
	}
	fd := int(f.Fd())
	pgrp, err := terminalGroup(fd)
	if err != nil || pgrp != syscall.Getpgrp() {
		return -1
	}
	return fd
}

func terminalGroup(fd int) (int, error) {
	var pgrp int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uintptr(syscall.TIOCGPGRP), uintptr(unsafe.Pointer(&pgrp))); errno != 0 {
		return 0, errno
	}
	return int(pgrp), nil
}

// takeTerminal makes dlock's group the terminal's foreground group again.
// dlock is a background process until it has: SIGTTOU, which would stop it
// for asking, is ignored meanwhile, and after, so that a terminal set to
// stop background writers (stty tostop) lets dlock report.
func takeTerminal(fd int) {
	setForeground(fd, syscall.Getpgrp())
}

// startCommand starts cmd in a process group of its own, in the terminal's
// foreground when tty is not -1.
func startCommand(cmd *exec.Cmd, tty int) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if tty >= 0 {
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
