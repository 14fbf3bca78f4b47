package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// These tests hold `dlock run` to its lock over every process the command
// starts, as flock(1) holds its lock while any process that inherited the
// descriptor lives: one that leaves the command's process group too, and
// one that ignores SIGTERM.

// leaveTheGroup is a shell command (bash's) that starts a process out of
// the command's process group, in a new session (setsid) or as a job of a
// shell with job control (set -m); once out, it writes its pid and its
// main process's to "$1", and sleeps.
var leaveTheGroup = map[string]string{
	"setsid": `setsid sh -c 'echo $$ "$2" > "$1"; exec sleep 100' sh "$1" $$ >/dev/null 2>&1 &`,
	"set -m": `set -m; sh -c 'echo $$ "$2" > "$1"; exec sleep 100' sh "$1" $$ >/dev/null 2>&1 & set +m;`,
}

// outOfGroup reads what leaveTheGroup's process wrote to fifo, checks that
// it leads a process group of its own, and returns its pid and the main
// process's.
func outOfGroup(t *testing.T, fifo string) (pid, main int) {
	t.Helper()
	if _, err := fmt.Sscan(readFifo(t, fifo, 15*time.Second), &pid, &main); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
		t.Fatalf("the process that should leave the command's group is in group %d (%v), not one of its own", pgid, err)
	}
	return pid, main
}

// parentOf is process pid's parent, 0 once pid is gone.
func parentOf(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	var state string
	var ppid int
	_, _ = fmt.Sscan(string(stat[strings.LastIndexByte(string(stat), ')')+1:]), &state, &ppid)
	return ppid
}

// Issue 36.1: a process that left the command's group keeps the lock until
// it ends: a second run waits for it.
func TestRun_AProcessThatLeftTheGroupKeepsTheLock(t *testing.T) {
	for how, script := range leaveTheGroup {
		t.Run(how, func(t *testing.T) {
			url, locks := testRedis(t)
			started := fifo(t, "started")
			first := startDlock(t, url, "", "run", "left", "--", "bash", "-c", script, "bash", started)
			leaver, main := outOfGroup(t, started)
			// Orphaned, the process is adopted by a process of the run that
			// holds the lock for it; or, once dlock has exited, by init.
			waitFor(t, 15*time.Second, "the main process exits and its orphan is adopted", func() bool {
				parent := parentOf(leaver)
				return gone(main) && parent != main && parent != first.cmd.Process.Pid
			})
			second := startDlock(t, url, "", "run", "--wait", "30s", "left", "--",
				"sh", "-c", `if kill -0 "$1" 2>/dev/null; then echo overlap; fi`, "sh", strconv.Itoa(leaver))
			waitFor(t, 15*time.Second, "the second run waits, or has run", func() bool {
				info, err := locks.Describe(context.Background(), "left")
				return err == nil && info.WritersWaiting == 1 || len(second.exited) > 0
			})
			if err := syscall.Kill(leaver, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if code := first.wait(t, 15*time.Second); code != 0 {
				t.Fatalf("first run: exit %d\nstderr: %s", code, &first.stderr)
			}
			if code := second.wait(t, 15*time.Second); code != 0 || second.stdout.String() != "" {
				t.Fatalf("second run: exit %d, stdout %q: it ran while the first run's process out of its group lived\nstderr: %s",
					code, &second.stdout, &second.stderr)
			}
		})
	}
}

// Issue 36.1: kill -9 of dlock takes down the processes that left the
// command's group too.
func TestRun_KillOfDlockTakesDownAProcessThatLeftTheGroup(t *testing.T) {
	for how, script := range leaveTheGroup {
		t.Run(how, func(t *testing.T) {
			url, _ := testRedis(t)
			started := fifo(t, "started")
			p := startDlock(t, url, "", "run", "--ttl", "1s", "left-killed", "--",
				"bash", "-c", script+` wait`, "bash", started)
			leaver, _ := outOfGroup(t, started)
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			p.wait(t, 15*time.Second)
			waitGone(t, leaver, 10*time.Second, "the process out of the command's group, after kill -9 of dlock,")
		})
	}
}

// Issue 36.1: a lost lock (forced open) kills at once every process of the
// command, one that ignores SIGTERM or left the group too: the lock is
// gone, and someone else may hold it already, so --kill-grace does not
// apply.
func TestRun_ALostLockKillsEveryProcessAtOnce(t *testing.T) {
	url, _ := testRedis(t)
	started, ready := fifo(t, "started"), fifo(t, "ready")
	p := startDlock(t, url, "", "run", "--ttl", "3s", "--kill-grace", "60s", "lost-all", "--", "bash", "-c",
		leaveTheGroup["setsid"]+` trap '' TERM; echo $$ > "$2"; while :; do sleep 0.05; done`, "bash", started, ready)
	leaver, _ := outOfGroup(t, started)
	command := readPid(t, ready)
	forceUnlock(t, url, "lost-all")
	if code := p.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d\nstderr: %s", code, exitLost, &p.stderr)
	}
	waitGone(t, command, 10*time.Second, "the command ignoring SIGTERM, after the lock was lost,")
	waitGone(t, leaver, 10*time.Second, "the process out of the command's group, after the lock was lost,")
}

// Issue 36.1: with Redis unreachable, a command that ignores SIGTERM does
// not run past the lease's deadline: SIGTERM comes --kill-grace before it
// (not before renewals have failed for half the TTL), SIGKILL at it.
func TestRun_ACommandIgnoringSIGTERMEndsAtTheLeasesDeadline(t *testing.T) {
	srv := redistest.Start(t)
	ready, termed := fifo(t, "ready"), filepath.Join(t.TempDir(), "termed")
	p := startDlock(t, "redis://"+srv.Addr(), "", "run", "--ttl", "2s", "--kill-grace", "30s", "stubborn", "--",
		"sh", "-c", `trap 'echo term > "$2"' TERM; echo $$ > "$1"; while :; do sleep 0.05; done`, "sh", ready, termed)
	command := readPid(t, ready)
	// The lease was renewed at most TTL/3 before; its deadline is at most
	// 2s after this moment.
	cut := time.Now()
	srv.Kill()
	if code := p.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d\nstderr: %s", code, exitLost, &p.stderr)
	}
	waitGone(t, command, 10*time.Second, "the command ignoring SIGTERM")
	took := time.Since(cut)
	t.Logf("exit 76 %v after Redis was killed", took)
	// 2s is the latest deadline; 1.5s is for a loaded machine.
	if took > 3500*time.Millisecond {
		t.Fatalf("dlock exited %v after Redis was killed, want about the TTL (2s)\nstderr: %s", took, &p.stderr)
	}
	if data, err := os.ReadFile(termed); err != nil || !strings.Contains(string(data), "term") {
		t.Fatalf("the command got no SIGTERM before SIGKILL: %v\nstderr: %s", err, &p.stderr)
	}
}

// Issue 36.1: dlock stopped (SIGSTOP) renews nothing: the command is killed
// at the lease's deadline all the same, and dlock, continued, exits 76,
// saying it was stopped rather than blaming Redis.
func TestRun_AStoppedDlockLetsNoCommandRunPastTheDeadline(t *testing.T) {
	url, _ := testRedis(t)
	ready := fifo(t, "ready")
	p := startDlock(t, url, "", "run", "--ttl", "1s", "stopped", "--",
		"sh", "-c", `echo $$ > "$1"; exec sleep 100 >/dev/null 2>&1`, "sh", ready)
	command := readPid(t, ready)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitGone(t, command, 10*time.Second, fmt.Sprintf("the command, with dlock (pid %d) stopped past the TTL,", p.cmd.Process.Pid))
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d\nstderr: %s", code, exitLost, &p.stderr)
	}
	// Redis was up all along: the loss is dlock's stop, and says so.
	if want := "dlock was stopped"; !strings.Contains(p.stderr.String(), want) {
		t.Fatalf("stderr does not say %q:\n%s", want, &p.stderr)
	}
}

// Issue 36.1: the guard killed alone (kill -9 of the command's group, which
// it is in) leaves no process of the command running once dlock has
// released the lock: dlock, their subreaper then, kills them.
func TestRun_AKilledGuardLeavesNoProcessOfTheCommand(t *testing.T) {
	url, _ := testRedis(t)
	started := fifo(t, "started")
	p := startDlock(t, url, "", "run", "guard-killed", "--",
		"bash", "-c", leaveTheGroup["setsid"]+` exec sleep 100 >/dev/null 2>&1`, "bash", started)
	leaver, main := outOfGroup(t, started)
	guard := parentOf(main)
	if err := syscall.Kill(guard, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 15*time.Second); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit %d, want %d (the guard's)\nstderr: %s", code, 128+int(syscall.SIGKILL), &p.stderr)
	}
	waitGone(t, main, 10*time.Second, "the command, its guard killed,")
	waitGone(t, leaver, 10*time.Second, "the process out of the command's group, its guard killed,")
	// One line, which says that the 137 is the guard's, not the command's.
	want := fmt.Sprintf(`dlock run: dlock-guard (pid %d) was killed by SIGKILL, not by dlock; killed the command with it: exit 137`, guard)
	if said := lines(p.stderr.String()); len(said) != 1 || said[0] != want {
		t.Fatalf("stderr %q, want the one line:\n%s", &p.stderr, want)
	}
}

// Issue 36: a stop of dlock shorter than the TTL loses nothing: continued,
// dlock lets the overdue renewal go out before it judges the deadline
// near, and does not stop the command.
func TestRun_AStopShorterThanTheTTLKeepsTheRun(t *testing.T) {
	url, locks := testRedis(t)
	ready, finish := fifo(t, "ready"), fifo(t, "finish")
	p := startDlock(t, url, "", "run", "--ttl", "4s", "short-stop", "--",
		"sh", "-c", `echo $$ > "$1"; cat "$2" >/dev/null`, "sh", ready, finish)
	readPid(t, ready)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ttl := func() time.Duration {
		info, err := locks.Describe(context.Background(), "short-stop")
		if err != nil {
			t.Fatal(err)
		}
		return info.TTL
	}
	// Stopped until the deadline is nearer than --kill-grace and TTL/2.
	waitFor(t, 10*time.Second, "the lease within 1.5s of its deadline", func() bool { return ttl() < 1500*time.Millisecond })
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the lease renewed", func() bool { return ttl() > 3*time.Second })
	// The tick after the renewal has seen a far deadline.
	waitFor(t, 10*time.Second, "a tick after the renewal", func() bool { return ttl() < 3800*time.Millisecond })
	if err := os.WriteFile(finish, []byte("done\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// stderr is read once dlock has exited: its writer runs until then.
	code := p.wait(t, 15*time.Second)
	if strings.Contains(p.stderr.String(), "lapses") {
		t.Fatalf("a stop shorter than the TTL stopped the command: %s", &p.stderr)
	}
	if code != 0 {
		t.Fatalf("exit %d, want 0\nstderr: %s", code, &p.stderr)
	}
}
