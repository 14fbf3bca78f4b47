package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Issue 36: a process dlock did not start (SAFETY: "neither killed nor held for")
// is not killed when it comes to dlock as an orphan late in the run: the
// shell's background job that exec'd into dlock forks a daemon just
// before the process the command left ends, between two of dlock's ticks
// (foreign.add): dlock's final killAll takes it for the command's.
func TestRun_AnOrphanOfTheCallersJobLateInTheRunIsLeftAlone(t *testing.T) {
	url, _ := testRedis(t)
	dir := t.TempDir()
	goFifo, spawned, pidFile := fifo(t, "go"), fifo(t, "spawned"), dir+"/orphan"
	script := `(read x < "$1"; sh -c 'sleep 1000 >/dev/null 2>&1 & echo $! > "$3"' sh "$1" "$2" "$3"; echo done > "$2") &
exec "$4" run late-orphan -- sh -c '(echo go > "$1"; cat "$2" > /dev/null) & exit 0' sh "$1" "$2"`
	cmd := exec.Command("sh", "-c", script, "sh", goFifo, spawned, pidFile, dlockBin)
	cmd.Env = append(os.Environ(), "REDIS_URL="+url)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	defer syscall.Kill(pid, syscall.SIGKILL)
	if gone(pid) {
		t.Fatalf("dlock killed pid %d, a process its caller started (not the command's)", pid)
	}
}
