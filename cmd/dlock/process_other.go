//go:build !linux

package main

import "syscall"

// dieWithDlock does nothing here: only Linux has the kernel kill a child
// when its parent dies. The guard kills the command's group, once told it.
func dieWithDlock(*syscall.SysProcAttr) {}

// becomeSubreaper does nothing here: the orphans of the command's processes
// go to init, which reaps them.
func becomeSubreaper() {}

func reapOrphans() {}

// commandStopped says false here: dlock does not follow the command's
// stops, and ^Z stops the command alone.
func commandStopped(int) bool { return false }

func suspend(int, int) {}

// nameProcess does nothing here: ps shows the argv[0] dlock set.
func nameProcess(string) {}
