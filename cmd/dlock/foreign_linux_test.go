package main

import (
	"os/exec"
	"testing"
)

// A process started after the guard is never foreign, even seen as dlock's
// child while the guard lives: the guard may die while dlock's children
// are read, and its orphans, the command's, then come to dlock (kill -9 of
// the guard left the command running without the lock, 3 to 9 in 400).
// One started in an earlier clock tick than the guard is the caller's.
func TestForeign_AProcessStartedAfterTheGuardIsNeverForeign(t *testing.T) {
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "1000")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	before := start()
	guard := start()
	for !startedBefore(processID(before.Process.Pid), processID(guard.Process.Pid)) {
		guard = start() // until a clock tick (10 ms) has passed
	}
	after := start()
	foreign := foreignSet{}
	foreign.add(guard.Process.Pid)
	if !foreign[processID(before.Process.Pid)] {
		t.Errorf("pid %d, started before the guard, is not foreign", before.Process.Pid)
	}
	if foreign[processID(after.Process.Pid)] || foreign[processID(guard.Process.Pid)] {
		t.Errorf("the guard or pid %d, started after it, is foreign: %v", after.Process.Pid, foreign)
	}
}
