package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Issue 36 (F1): ps and top show a process by its comm, which for dlock's
// guard was "exe", the name of /proc/self/exe it was started from. It
// names itself dlock-guard, as its argv[0] and the docs say.
func TestRun_TheGuardShowsAsDlockGuardInPs(t *testing.T) {
	url, _ := testRedis(t)
	ready := fifo(t, "ready")
	p := startDlock(t, url, "", "run", "named", "--", "sh", "-c", `echo go > "$1"; exec sleep 60`, "sh", ready)
	readFifo(t, ready, 15*time.Second)
	guard := 0
	for _, pid := range childrenOf(t, p.cmd.Process.Pid) {
		if argv, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasPrefix(string(argv), "dlock-guard\x00") {
			guard = pid
		}
	}
	if guard == 0 {
		t.Fatalf("no child of dlock (pid %d) started as dlock-guard", p.cmd.Process.Pid)
	}
	comm := func() string {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", guard))
		return strings.TrimSpace(string(b))
	}
	// The guard names itself as it starts, which may be after the command
	// does: its state in another process, polled.
	for deadline := time.Now().Add(10 * time.Second); comm() != "dlock-guard"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the guard (pid %d) shows in ps as %q, want dlock-guard", guard, comm())
		}
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var children []int
	for _, path := range stats {
		stat, err := os.ReadFile(path)
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			children = append(children, child)
		}
	}
	return children
}
