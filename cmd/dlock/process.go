package main

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

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
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false // no controlling terminal
	}
	defer tty.Close()
	fg, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err == nil && fg == syscall.Getpgrp()
}
