package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Issue 36: dlock's output blocked (a pipe nobody reads, ^S on a terminal)
// does not keep dlock from telling the guard the lease's deadline, which
// dlock renews on: the guard does not kill a process of a run that holds
// the lock. The pipe, one page, is full before dlock says it holds the
// lock for the process left; the test watches that process through three
// TTLs, then reads the pipe.
func TestRun_ABlockedOutputDoesNotLetTheGuardKill(t *testing.T) {
	url, _ := testRedis(t)
	cmd, r, left, finish := blockedRun(t, url, "--ttl", "1s", "blocked")
	for until := time.Now().Add(3 * time.Second); time.Now().Before(until); time.Sleep(50 * time.Millisecond) {
		if gone(left) {
			t.Fatal("the guard killed a process of the run while dlock's output was blocked")
		}
	}
	said := make(chan []byte)
	go func() { data, _ := io.ReadAll(r); said <- data }()
	if err := os.WriteFile(finish, []byte("done\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	text := strings.Trim(string(<-said), "\x00")
	if cmd.ProcessState.ExitCode() != 0 || strings.Contains(text, "killed") {
		t.Fatalf("exit %v, want 0\noutput: %s", err, text)
	}
}

// Issue 36: a forced loss kills the command at the next renewal (TTL/3), not at the
// lease's deadline (TTL), even while dlock's output is blocked: the loop
// stuck writing "holding … until the processes it left have ended" does
// not read lease.Done, and only the guard kills, at the old deadline.
// TTL 9s: renewals every 3s, so the loss is seen by force+3s, and the
// guard's deadline is at force+6s at the earliest; the check is at +5s.
func TestRun_ABlockedOutputDoesNotDelayTheKillOfAForcedLoss(t *testing.T) {
	url, _ := testRedis(t)
	cmd, _, left, _ := blockedRun(t, url, "--ttl", "9s", "blocked-loss")
	force := exec.Command(dlockBin, "unlock", "--force", "--yes", "blocked-loss")
	force.Env = cmd.Env
	if out, err := force.CombinedOutput(); err != nil {
		t.Fatalf("unlock --force: %v: %s", err, out)
	}
	forced := time.Now()
	for !gone(left) {
		if time.Since(forced) > 5*time.Second {
			t.Fatal("a process of the run still runs 5s after a forced loss (renewals every 3s): blocked output held back dlock's kill")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Issue 36: the processes the command left ended, dlock releases the lock
// even while its output is blocked: only dlock's exit waits for its lines.
func TestRun_ABlockedOutputDoesNotHoldTheLockPastTheRun(t *testing.T) {
	url, locks := testRedis(t)
	_, _, left, finish := blockedRun(t, url, "blocked-release")
	if err := os.WriteFile(finish, []byte("done\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitGone(t, left, 10*time.Second, "the process left, its input closed,")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := locks.RWMutex("blocked-release").Lock(ctx)
	if err != nil {
		t.Fatalf("the run's processes ended, its output blocked: the lock is still held 10s on (%v)", err)
	}
	_ = lease.Unlock(context.Background())
}

// blockedRun starts dlock run with args, whose command leaves a process
// reading finish (its pid in ready) and fills dlock's output, a pipe of
// one page nobody reads until the caller reads r. It returns once the
// pipe is full.
func blockedRun(t *testing.T, url string, args ...string) (cmd *exec.Cmd, r *os.File, left int, finish string) {
	t.Helper()
	ready, finish := fifo(t, "ready"), fifo(t, "finish")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if _, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, os.Getpagesize()); err != nil {
		t.Fatal(err)
	}
	args = append(append([]string{"run"}, args...), "--", "sh", "-c",
		`cat "$2" >/dev/null 2>&1 & echo $! > "$1"; head -c "$3" /dev/zero; exit 0`, "sh", ready, finish, strconv.Itoa(os.Getpagesize()))
	cmd = exec.Command(dlockBin, args...)
	cmd.Env = append(os.Environ(), "REDIS_URL="+url)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	left = readPid(t, ready)
	waitFor(t, 15*time.Second, "the command fills dlock's output", func() bool {
		n, err := unix.IoctlGetInt(int(r.Fd()), syscall.TIOCINQ)
		return err == nil && n == os.Getpagesize()
	})
	return cmd, r, left, finish
}
