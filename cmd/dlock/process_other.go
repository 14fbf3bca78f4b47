//go:build !linux

package main

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// becomeSubreaper does nothing here: the orphans of the command's
// processes go to init, out of the guard's reach.
func becomeSubreaper() {}

// commandProcesses is the guard's command, main, alone here: without
// /proc, no other process of the command can be found, and dlock (main
// nil) finds none.
func commandProcesses(main *os.Process, _ foreignSet) []int {
	if main == nil {
		return nil
	}
	return []int{main.Pid}
}

// foreignSet is not needed here: nothing is found below dlock.
type foreignSet map[string]bool

func (foreignSet) add(int) {}

// killAll kills the guard's command, main: the only process of the
// command the guard knows here. dlock (main nil) kills nothing: on a loss
// it closes the guard's pipe instead, as if it had died.
func killAll(main *os.Process, _ foreignSet) (unkilled []int) {
	if main != nil {
		_ = main.Kill()
	}
	return nil
}

// readTermios is the ioctl that reads a terminal's settings.
const readTermios = syscall.TIOCGETA

func processName(int) string { return "?" }

// sharedFile is a file of the temp dir: no memfd_create here.
func sharedFile() (*os.File, error) { return tempFile() }

// ignoreTTOU does nothing here: dlock ignores SIGTTOU only once the
// guard has started, which inherits the default.
func ignoreTTOU() (ignored bool) { return false }

// nameProcess does nothing here: ps shows the argv[0] dlock set.
func nameProcess(string) {}

// bootClock is CLOCK_MONOTONIC in nanoseconds: dlock and the guard share
// it, and no one sets it.
func bootClock() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
