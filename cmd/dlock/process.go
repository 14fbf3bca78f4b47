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
