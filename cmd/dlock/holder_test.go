package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A run stores who holds the lock (host, dlock's pid, the command's
// program, --info), and status shows it, in text and in JSON.
func TestRun_StatusShowsTheHolderInfo(t *testing.T) {
	url, _ := testRedis(t)
	ready := fifo(t, "ready")
	p := startDlock(t, url, "", "run", "--info", "deploy #42 by ana", "deploy", "--",
		"sh", "-c", `echo go > "$1"; sleep 60`, "sh", ready)
	readFifo(t, ready, 15*time.Second)

	code, stdout, stderr := runDlock(t, url, "status", "--json", "deploy")
	if code != 0 {
		t.Fatalf("status: exit %d, %s", code, stderr)
	}
	var s statusJSON
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Holders) != 1 || s.Holders[0].Info == nil {
		t.Fatalf("holders without info: %s", stdout)
	}
	info := s.Holders[0].Info
	if info.PID != p.cmd.Process.Pid || info.Program != "sh" || info.User != "deploy #42 by ana" || info.Hostname == "" {
		t.Fatalf("holder info %+v; want dlock's pid %d, program sh, the --info text", *info, p.cmd.Process.Pid)
	}
	code, stdout, _ = runDlock(t, url, "status", "deploy")
	if code != 0 || !strings.Contains(stdout, "pid "+strconv.Itoa(p.cmd.Process.Pid)) || !strings.Contains(stdout, "deploy #42 by ana") {
		t.Fatalf("text status without the holder info: exit %d\n%s", code, stdout)
	}
	_ = p.cmd.Process.Kill()
}

// An --info that would make the holder info too long is a usage error,
// before any lock is taken.
func TestRun_InfoTooLongIsAUsageError(t *testing.T) {
	url, _ := testRedis(t)
	code, _, stderr := runDlock(t, url, "run", "--info", strings.Repeat("x", 600), "job", "--", "true")
	if code != exitUsage || !strings.Contains(stderr, "--info") {
		t.Fatalf("exit %d, stderr %q; want %d naming --info", code, stderr, exitUsage)
	}
}
