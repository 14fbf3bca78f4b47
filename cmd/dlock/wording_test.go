package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// Issue 36: dlock's messages speak of the command line, not of Go's API or
// of how Go starts a process.

// status counts waiters (Redis keeps no names of them), in good grammar.
func TestStatus_CountsOneWaiterInTheSingular(t *testing.T) {
	url, locks := testRedis(t)
	ctx, must := context.Background(), mustLease(t)
	must(locks.RWMutex("rw", dlock.WithOwner("holder")).Lock(ctx))
	waiter := startDlock(t, url, "", "run", "rw", "--", "true")
	waitFor(t, 15*time.Second, "a writer waits", func() bool {
		info, err := locks.Describe(ctx, "rw")
		return err == nil && info.WritersWaiting == 1
	})
	code, stdout, stderr := runDlock(t, url, "status", "rw")
	if code != 0 || !strings.Contains(stdout, "waiting:     1 writer, 0 readers\n") {
		t.Fatalf("status with one writer waiting: exit %d\n%s%s", code, stdout, stderr)
	}
	_ = waiter.cmd.Process.Kill()
	if _, help, _ := runDlock(t, url, "--help"); strings.Contains(help, "who waits") {
		t.Errorf("dlock --help says status shows who waits; it shows how many:\n%s", help)
	}
}

// --permits N on a Semaphore of another number names both numbers in the
// command line's words: "this handle 3" was Go's.
func TestRun_PermitsMismatchNamesBothNumbers(t *testing.T) {
	url, locks := testRedis(t)
	mustLease(t)(locks.Semaphore("pool", 2).Acquire(context.Background()))
	code, _, stderr := runDlock(t, url, "run", "--permits", "3", "-n", "pool", "--", "true")
	want := `dlock run: --permits 3, but the Semaphore "pool" has 2 permits`
	if code != exitFailure || !strings.HasPrefix(stderr, want) || strings.Contains(stderr, "handle") {
		t.Fatalf("--permits 3 on a Semaphore of 2: exit %d, stderr:\n%s\nwant %d and:\n%s", code, stderr, exitFailure, want)
	}
}

// A command that cannot start is said so, without "fork/exec" or "exec:".
func TestRun_ACommandThatCannotStartIsSaidPlainly(t *testing.T) {
	url, _ := testRedis(t)
	notExecutable := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExecutable, []byte("echo hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		command string
		code    int
		want    string
	}{
		{"/nonexistent/job", exitNotFound, `dlock run: cannot run "/nonexistent/job": no such file or directory`},
		{"no-such-command-here", exitNotFound, `dlock run: cannot run "no-such-command-here": executable file not found in $PATH`},
		{notExecutable, exitCannotRun, `dlock run: cannot run "` + notExecutable + `": permission denied`},
	} {
		code, _, stderr := runDlock(t, url, "run", "x", "--", tc.command)
		if code != tc.code || strings.TrimSpace(stderr) != tc.want {
			t.Errorf("run -- %s: exit %d, stderr:\n%s\nwant %d and:\n%s", tc.command, code, stderr, tc.code, tc.want)
		}
	}
}

// A lost lock is said in one plain sentence, not as the Go error's text.
// A hold found gone before the lease's deadline cannot have expired:
// unlock --force (or a DEL) removed it. An RWMutex's hold carries no mark
// of a forced removal, hence "or deleted".
func TestRun_ALostLockIsSaidPlainly(t *testing.T) {
	url, _ := testRedis(t)
	ready := fifo(t, "ready")
	p := startDlock(t, url, "", "run", "--ttl", "3s", "deploy", "--", "sh", "-c", `echo > "$1"; sleep 60`, "sh", ready)
	readFifo(t, ready, 15*time.Second)
	forceUnlock(t, url, "deploy")
	if code := p.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d\n%s", code, exitLost, &p.stderr)
	}
	want := `dlock run: lost the lock "deploy" (it was forced open or deleted before its deadline); killed the command` + "\n"
	if got := p.stderr.String(); !strings.Contains(got, want) || strings.Contains(got, "lease lost") {
		t.Fatalf("stderr:\n%s\nwant:\n%s", got, want)
	}
}

// flock(1)'s -x and -e (an exclusive lock, dlock run's default) are taken,
// so that flock's command lines run as they are; after -s, they undo it,
// as in flock, where the last of them counts.
func TestRun_FlocksExclusiveFlagsAreTaken(t *testing.T) {
	url, locks := testRedis(t)
	mustLease(t)(locks.RWMutex("readers", dlock.WithOwner("reader")).RLock(context.Background()))
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"-x", "-n"}, exitNotAcquired}, // exclusive: not beside a reader
		{[]string{"-e", "-n"}, exitNotAcquired},
		{[]string{"-xn"}, exitNotAcquired},
		{[]string{"-s", "-x", "-n"}, exitNotAcquired}, // the last counts
		{[]string{"-x", "-s", "-n"}, 0},
	} {
		code, _, stderr := runDlock(t, url, append(append([]string{"run"}, tc.args...), "readers", "--", "true")...)
		if code != tc.code {
			t.Errorf("run %q beside a reader: exit %d, want %d\n%s", tc.args, code, tc.code, stderr)
		}
	}
	if code, help, _ := runDlock(t, url, "run", "--help"); code != 0 || !strings.Contains(help, "  -e, -x\n") {
		t.Errorf("run --help does not list -e, -x:\n%s", help)
	}
}
