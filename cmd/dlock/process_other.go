//go:build !linux

package main

import (
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// becomeSubreaper does nothing here: the orphans of the command's
// processes go to init, out of the guard's reach.
func becomeSubreaper() {}

// commandProcesses finds none here, without /proc.
func commandProcesses(int, foreignSet) []int { return nil }

// foreignSet is not needed here: killAll reaches only the command's group.
type foreignSet map[string]bool

func (foreignSet) add(int) {}

// killAll kills the command's process group: without /proc, the
// processes that left the group are out of reach, and those it may not
// kill go unnamed. The guard, in the group, first moves to dlock's, or
// would kill itself before saying why; with dlock dead, it cannot, and
// dies with the command.
func killAll(group int, _ foreignSet) (unkilled []int) {
	if syscall.Getpgrp() == group {
		_ = leaveGroup()
	}
	_ = syscall.Kill(-group, syscall.SIGKILL)
	return nil
}

// leaveGroup moves the guard to its parent's group, dlock's.
func leaveGroup() error {
	parentGroup, err := syscall.Getpgid(os.Getppid())
	if err != nil {
		return err
	}
	return syscall.Setpgid(0, parentGroup)
}

// readTermios is the ioctl that reads a terminal's settings.
const readTermios = syscall.TIOCGETA

func processName(int) string { return "?" }

// sharedFile is a file of the temp dir: no memfd_create here.
func sharedFile() (*os.File, error) { return tempFile() }

// defaultTTOU does nothing here: dlock ignores SIGTTOU only once the
// guard has started (see startCommand), which inherits the default.
func defaultTTOU() {}

// ignoreTTOU does nothing here (see defaultTTOU).
func ignoreTTOU() (ignored bool) { return false }

// waitForGroup waits, once the command's main process has exited, for the
// rest of its process group: the processes it left, which no subreaper
// brings to the guard here. The guard moves to dlock's group, to tell the
// others from itself. Processes that left the group are not waited for.
func waitForGroup() {
	if leaveGroup() != nil {
		return
	}
	for syscall.Kill(-os.Getpid(), 0) == nil {
		time.Sleep(50 * time.Millisecond) // nothing tells a process when a group empties
	}
}

// suspend does nothing here: ^Z stops only the command.
func suspend(int, int, syscall.Signal) {}

// nameProcess does nothing here: ps shows the argv[0] dlock set.
func nameProcess(string) {}

// bootClock is CLOCK_MONOTONIC in nanoseconds: dlock and the guard share
// it, and no one sets it.
func bootClock() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// groupStopped cannot look here, without /proc: the guard takes a stop of
// the command for the job's.
func groupStopped() bool { return true }
