package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests hold the guard to the lease as dlock has it (issue 36): a
// renewal confirmed just before the deadline reaches the guard in time.

// Issue 36: dlock stopped (SIGSTOP) for less than the TTL renews the lease
// as soon as it runs again; the guard, which kills at the deadline it last
// read, must learn of that renewal before the old deadline, not at dlock's
// next tick after it. The test continues dlock 150 ms before the deadline
// that Redis shows (the key's TTL): dlock's ticks come every 300 ms here,
// the last before that at least 150 ms earlier, the next after it.
func TestRun_ARenewalJustBeforeTheDeadlineReachesTheGuard(t *testing.T) {
	url, locks := testRedis(t)
	ready, finish := fifo(t, "ready"), fifo(t, "finish")
	p := startDlock(t, url, "", "run", "--ttl", "3s", "renew-late", "--",
		"sh", "-c", `echo $$ > "$1"; cat "$2" >/dev/null`, "sh", ready, finish)
	command := readPid(t, ready)
	dlockPid := p.cmd.Process.Pid
	if err := syscall.Kill(dlockPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(dlockPid, syscall.SIGCONT) })
	info, err := locks.Describe(context.Background(), "renew-late")
	if err != nil || info.TTL <= 0 {
		t.Fatalf("describe: %+v, %v", info, err)
	}
	deadline := time.Now().Add(info.TTL)
	time.Sleep(time.Until(deadline.Add(-150 * time.Millisecond))) // the stop is the scenario
	if err := syscall.Kill(dlockPid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for until := deadline.Add(time.Second); time.Now().Before(until); time.Sleep(10 * time.Millisecond) {
		if gone(command) {
			t.Fatalf("the guard killed the command of a lease renewed before its deadline\nstderr: %s", &p.stderr)
		}
	}
	if err := os.WriteFile(finish, []byte("done\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\nstderr: %s", code, &p.stderr)
	}
}

// Issue 36: a process dlock did not start (a child of the shell that
// exec'd into dlock: dlock's child, but not the command's) is neither
// killed when the run ends nor held for.
func TestRun_AProcessDlockDidNotStartIsLeftAlone(t *testing.T) {
	url, _ := testRedis(t)
	side := filepath.Join(t.TempDir(), "side")
	cmd := exec.Command("sh", "-c", `sleep 1000 >/dev/null 2>&1 & echo $! > "$1"; exec "$2" run sidecar -- true`, "sh", side, dlockBin)
	cmd.Env = append(os.Environ(), "REDIS_URL="+url)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\nstderr: %s", err, &stderr)
	}
	text, err := os.ReadFile(side)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(text)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if gone(pid) {
		t.Fatalf("dlock killed a process it did not start\nstderr: %s", &stderr)
	}
	if strings.Contains(stderr.String(), "holding") {
		t.Fatalf("dlock held the lock for a process it did not start\nstderr: %s", &stderr)
	}
}

// Issue 36: a kill -STOP of one process the command left, by someone
// else, is not a stop of the job: dlock runs on and renews the lock, and
// the guard kills no process of it at the deadline. The test watches
// through two TTLs.
func TestRun_AStopOfOneProcessLeftDoesNotStopTheRun(t *testing.T) {
	url, locks := testRedis(t)
	started := fifo(t, "started")
	term := startTerminal(t, fmt.Sprintf(`set -m
export REDIS_URL=%s
%s run --ttl 1s stop-one -- sh -c 'sleep 100 & first=$!; sleep 101 & echo $first $! > "$1"; exit 0' sh %s
echo "ended:$?"
sleep 600
`, url, dlockBin, started))
	var left [2]int
	if _, err := fmt.Sscan(readFifo(t, started, 15*time.Second), &left[0], &left[1]); err != nil {
		t.Fatal(err)
	}
	for _, pid := range left {
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	}
	term.waitScreen(`holding "stop-one"`)
	dlockPid := parentOf(parentOf(left[0]))
	if err := syscall.Kill(left[1], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for until := time.Now().Add(2 * time.Second); time.Now().Before(until); time.Sleep(10 * time.Millisecond) {
		if s := state(dlockPid); s == "T" || gone(left[0]) {
			t.Fatalf("a stop of one process left stopped the run: dlock %q, the other left gone: %v\n%s",
				s, gone(left[0]), term.screen())
		}
	}
	if info, err := locks.Describe(context.Background(), "stop-one"); err != nil || len(info.Holders) != 1 {
		t.Fatalf("after two TTLs: %+v, %v; want the lock held", info, err)
	}
	for _, pid := range left {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	term.waitScreen("ended:0")
}
