package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// A guard that dies of a signal Go's runtime turns into a crash (SIGABRT,
// SIGSEGV from kill, a panic of its own) exits 2, not by the signal: dlock
// must not take it for a guard that waited for every process, or the
// command, orphaned to dlock and then to init, runs on without the lock.
func TestRun_AGuardThatCrashedLeavesNoProcessOfTheCommand(t *testing.T) {
	url, _ := testRedis(t)
	ready := fifo(t, "ready")
	cmd := exec.Command(dlockBin, "run", "crash", "--", "sh", "-c", `echo $$ > "$1"; exec sleep 1000`, "sh", ready)
	cmd.Env = append(os.Environ(), "REDIS_URL="+url)
	stderr, err := os.CreateTemp(t.TempDir(), "stderr") // a pipe would wait for a command left running
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	command := readPid(t, ready)
	t.Cleanup(func() { _ = syscall.Kill(command, syscall.SIGKILL) })
	guard := parentOf(command)
	if err := syscall.Kill(guard, syscall.SIGABRT); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if !gone(command) {
		t.Fatalf("dlock exited %d with its guard crashed; the command (pid %d) runs on without the lock",
			exitCode(cmd), command)
	}
	said := fmt.Sprintf("dlock-guard (pid %d) exited 2 before the command ended, not by dlock; killed the command with it: exit 70", guard)
	out, _ := os.ReadFile(stderr.Name())
	if exitCode(cmd) != exitGuardFailed || !strings.Contains(string(out), said) {
		t.Fatalf("exit %d, want 2 and %q; said:\n%s", exitCode(cmd), said, out)
	}
}
