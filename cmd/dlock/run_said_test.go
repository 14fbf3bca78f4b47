package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// Issue 36: what dlock says when a run loses its lock or cannot release it,
// each said once, in the words of what dlock knows.

// lines are the non-empty lines of s.
func lines(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == '\n' })
}

// dlock stopped (SIGSTOP) past the TTL, the guard, not dlock, finds the
// deadline passed and kills the command; continued, dlock exits 76 and the
// loss is said in one line, not once by the guard and again by dlock.
func TestRun_TheGuardsKillAtTheDeadlineIsSaidOnce(t *testing.T) {
	url, _ := testRedis(t)
	ready := fifo(t, "ready")
	p := startDlock(t, url, "", "run", "--ttl", "1s", "guard-kills", "--",
		"sh", "-c", `echo $$ > "$1"; exec sleep 100 >/dev/null 2>&1`, "sh", ready)
	command := readPid(t, ready)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// dlock is stopped: only the guard can kill the command.
	waitGone(t, command, 10*time.Second, "the command, dlock stopped past the TTL,")
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d\nstderr: %s", code, exitLost, &p.stderr)
	}
	said := lines(p.stderr.String())
	if len(said) != 1 || !strings.HasPrefix(said[0], `dlock run: lost the lock "guard-kills" (`) ||
		!strings.HasSuffix(said[0], "; killed the command") {
		t.Fatalf("stderr %q, want one line saying the lock was lost and the command killed", &p.stderr)
	}
}

// A lease whose deadline passed with Redis unreachable is said as that:
// with Redis unreachable, nothing was confirmed.
func TestRun_AnUnreachableLossSaysWhatDlockKnows(t *testing.T) {
	srv := redistest.Start(t)
	ready := fifo(t, "ready")
	p := startDlock(t, "redis://"+srv.Addr(), "", "run", "--ttl", "3s", "--kill-grace", "0", "unreachable", "--",
		"sh", "-c", `trap '' TERM; echo $$ > "$1"; exec sleep 100 >/dev/null 2>&1`, "sh", ready)
	command := readPid(t, ready)
	srv.Kill()
	waitGone(t, command, 15*time.Second, "the command, Redis unreachable past the deadline,")
	if code := p.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d\nstderr: %s", code, exitLost, &p.stderr)
	}
	want := `dlock run: lost the lock "unreachable" (Redis unreachable past its deadline); killed the command`
	if got := p.stderr.String(); !strings.Contains(got, want+"\n") || strings.Contains(got, "confirmed") {
		t.Fatalf("stderr:\n%s\nwant the line:\n%s", got, want)
	}
}

// A release Redis did not confirm is one operator's sentence, the name
// escaped, without Go's error chain (dial tcp …, doubled prefixes).
func TestRun_AFailedReleaseIsOneSentence(t *testing.T) {
	srv := redistest.Start(t)
	ready, finish := fifo(t, "ready"), fifo(t, "finish")
	name := "rel\x1bfail"
	p := startDlock(t, "redis://"+srv.Addr(), "", "run", "--ttl", "60s", name, "--",
		"sh", "-c", `echo $$ > "$1"; cat "$2" >/dev/null`, "sh", ready, finish)
	readPid(t, ready)
	srv.Kill()
	if err := os.WriteFile(finish, []byte("done\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\nstderr: %s", code, &p.stderr)
	}
	said := lines(p.stderr.String())
	want := `dlock run: releasing "rel\x1bfail": Redis unreachable (it expires within its TTL)`
	if len(said) != 1 || said[0] != want {
		t.Fatalf("stderr %q, want the one line:\n%s", &p.stderr, want)
	}
}

// With Redis unreachable, the SIGTERM that stops the command is not
// followed by "holding … until the processes it left have ended": dlock
// is about to kill them. The run then ends in a line that says why it
// exits 76, whether the command ended on the SIGTERM or was killed.
func TestRun_AStopForAnUnreachableRedisIsSaidToTheEnd(t *testing.T) {
	for what, script := range map[string]string{
		"left":  `(trap '' TERM; exec sleep 100 >/dev/null 2>&1) & echo $$ > "$1"; wait`,
		"ended": `echo $$ > "$1"; while :; do sleep 0.05; done`,
	} {
		t.Run(what, func(t *testing.T) {
			srv := redistest.Start(t)
			ready := fifo(t, "ready")
			p := startDlock(t, "redis://"+srv.Addr(), "", "run", "--ttl", "3s", "--kill-grace", "1s", "stopped", "--",
				"sh", "-c", script, "sh", ready)
			readPid(t, ready)
			srv.Pause()
			t.Cleanup(srv.Resume)
			if code := p.wait(t, 30*time.Second); code != exitLost {
				t.Fatalf("exit %d, want %d\nstderr: %s", code, exitLost, &p.stderr)
			}
			said := lines(p.stderr.String())
			if strings.Contains(p.stderr.String(), "holding") || len(said) != 2 ||
				!strings.HasPrefix(said[0], `dlock run: the lock "stopped" could not be renewed`) ||
				!strings.Contains(said[1], `"stopped"`) {
				t.Fatalf("stderr %q, want the SIGTERM's line, then one that ends the run", &p.stderr)
			}
		})
	}
}
