//go:build !linux

package main

import (
	"os"
	"syscall"
	"time"
)

// becomeSubreaper does nothing here: the orphans of the command's
// processes go to init, out of the guard's reach.
func becomeSubreaper() {}

// descendants finds none here, without /proc: the guard signals the
// command's process group instead (signalOwnGroup).
func descendants(int) []int { return nil }

// signalOwnGroup sends sig to the command's process group, which the guard
// leads (its id is the guard's pid): the guard too while it is in it.
func signalOwnGroup(sig syscall.Signal) { _ = syscall.Kill(-os.Getpid(), sig) }

// waitForGroup waits, once the command's main process has exited, for the
// rest of its process group: the processes it left, which no subreaper
// brings to the guard here. The guard moves to dlock's group, to tell the
// others from itself. Processes that left the group are not waited for.
func waitForGroup() {
	parentGroup, err := syscall.Getpgid(os.Getppid())
	if err != nil || syscall.Setpgid(0, parentGroup) != nil {
		return
	}
	for syscall.Kill(-os.Getpid(), 0) == nil {
		time.Sleep(50 * time.Millisecond) // nothing tells a process when a group empties
	}
}

// commandStopped says false here: dlock does not follow the command's
// stops, and ^Z stops the command alone.
func commandStopped(int) bool { return false }

func suspend(int, int) {}

// nameProcess does nothing here: ps shows the argv[0] dlock set.
func nameProcess(string) {}
