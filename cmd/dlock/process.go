package main

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// terminalForeground says whether this process's group (dlock's, the
// job's) is its terminal's foreground, and whether it has a terminal.
func terminalForeground() (foreground, tty bool) {
	f, err := os.Open("/dev/tty")
	if err != nil {
		return false, false // no controlling terminal
	}
	defer f.Close()
	fg, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	return err == nil && fg == syscall.Getpgrp(), true
}

// fromTerminal says whether sig, which reached dlock or the guard, came
// from the terminal: ^C or ^\ while dlock's group, the job of the command,
// is the terminal's foreground. The kernel sent it to the whole job then,
// and the command's processes in the group have it already: passed on
// again, it would reach them twice (many tools take a second ^C for
// "force quit"). A kill -INT of dlock's pid then is taken for ^C.
func fromTerminal(sig os.Signal) bool {
	if sig != syscall.SIGINT && sig != syscall.SIGQUIT {
		return false
	}
	foreground, _ := terminalForeground()
	return foreground
}
