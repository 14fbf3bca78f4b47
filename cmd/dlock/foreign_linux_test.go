package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// dlock's children seen while the guard's main thread lives are the
// caller's, even one started after the guard (an orphan of the caller's
// job, as in a container's `sh -c 'job & exec dlock run …'`): the guard's
// own orphans go to dlock only once all its threads have exited. The
// guard is never foreign.
func TestForeign_ChildrenSeenWhileTheGuardLivesAreTheCallers(t *testing.T) {
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "1000")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	guard := start()
	after := start()
	foreign := foreignSet{}
	foreign.add(guard.Process.Pid)
	if !foreign[processID(after.Process.Pid)] {
		t.Errorf("pid %d, a child of dlock's seen while the guard lives, is not foreign: %v", after.Process.Pid, foreign)
	}
	if foreign[processID(guard.Process.Pid)] {
		t.Errorf("the guard is foreign: %v", foreign)
	}
}

// A reading of dlock's children made as the guard died is dropped: its
// orphans, the command's, may be among them (kill -9 of the guard left
// the command running without the lock, 3 to 9 in 400). threadAlive,
// checked after the reading, tells a guard whose main thread has exited.
func TestForeign_AGuardThatExitedIsNotAlive(t *testing.T) {
	live := exec.Command("sleep", "1000")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
	born := processID(live.Process.Pid)
	if !threadAlive(live.Process.Pid, born) {
		t.Fatalf("a live process is not alive")
	}
	if threadAlive(live.Process.Pid, strconv.Itoa(live.Process.Pid)+"@0") {
		t.Errorf("a process born at another time (its pid reused) is alive")
	}
	_ = live.Process.Kill()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		stat, _ := os.ReadFile("/proc/" + strconv.Itoa(live.Process.Pid) + "/stat")
		if fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(fields) > 0 && fields[0] == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed process did not become a zombie")
		}
	}
	if threadAlive(live.Process.Pid, born) {
		t.Errorf("a zombie is alive")
	}
}
