package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/redistest"
)

// waitScreenUntil waits until the screen satisfies cond.
func (term *terminal) waitScreenUntil(what string, cond func(screen string) bool) string {
	term.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		screen := term.screen()
		if cond(screen) {
			return screen
		}
		if time.Now().After(deadline) {
			term.t.Fatalf("the terminal does not show %s:\n%s", what, screen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ttlShown is the TTL column of the screen's line of the lock name; 0 when
// there is none.
func ttlShown(screen, name string) time.Duration {
	for _, line := range strings.Split(screen, "\n") {
		fields := strings.Fields(line)
		if len(fields) > 3 && fields[0] == name {
			ttl, _ := time.ParseDuration(fields[3])
			return ttl
		}
	}
	return 0
}

// As a person sees it: watch draws the held lock with its TTL counting
// down, drops it once released, and q ends it with the terminal as it was
// (the screen before it, keys echoed, lines read whole); Ctrl-C ends a
// watch of one NAME, shown even while free, as cleanly.
func TestWatch_ALiveViewInTheTerminalThatQuitsOnQ(t *testing.T) {
	url, locks := testRedis(t)
	term := startTerminal(t, fmt.Sprintf(`export REDIS_URL=%s
trap 'echo sh-interrupted' INT
echo before-watch
%[2]s watch --interval 200ms 'job*'
echo "watch-exit:$?"
printf "typed? "; read answer; echo "got:$answer"
read next
%[2]s watch --interval 200ms job-2
echo "watch2-exit:$?"
sleep 600
`, url, dlockBin))
	term.waitScreen("q quits")
	if screen := term.screen(); strings.Contains(screen, "before-watch") {
		t.Fatalf("watch draws over the shell's screen instead of a screen of its own:\n%s", screen)
	}
	ctx := context.Background()
	lease, err := locks.Mutex("job-1", dlock.WithTTL(30*time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	screen := term.waitScreenUntil("job-1 with its TTL", func(s string) bool { return ttlShown(s, "job-1") > 0 })
	first := ttlShown(screen, "job-1")
	if first > 30*time.Second || !strings.Contains(screen, "held") {
		t.Fatalf("job-1 shown with TTL %v; want held, 30s at most:\n%s", first, screen)
	}
	term.waitScreenUntil("job-1's TTL counting down", func(s string) bool {
		ttl := ttlShown(s, "job-1")
		return ttl > 0 && ttl < first
	})
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	term.waitScreenUntil("job-1 gone once released", func(s string) bool {
		return strings.Contains(s, "q quits") && !strings.Contains(s, "job-1")
	})
	term.tmux("send-keys", "q")
	screen = term.waitScreenUntil("the shell's screen back", func(s string) bool { return strings.Contains(s, "watch-exit:0") })
	if !strings.Contains(screen, "before-watch") || strings.Contains(screen, "q quits") {
		t.Fatalf("after q, want the screen as before watch:\n%s", screen)
	}
	term.typeLine("hello")
	term.waitScreen("typed? hello") // echoed as typed
	term.waitScreen("got:hello")    // and read as a whole line
	// The next watch starts only now: it takes the screen, and a capture
	// made after it started would not show "got:hello".
	term.typeLine("next")

	term.waitScreenUntil("job-2, free", func(s string) bool {
		return strings.Contains(s, "job-2") && strings.Contains(s, "free")
	})
	term.tmux("send-keys", "C-c")
	screen = term.waitScreenUntil("the shell's screen back after Ctrl-C", func(s string) bool {
		return strings.Contains(s, "watch2-exit:0")
	})
	if !strings.Contains(screen, "got:hello") || strings.Contains(screen, "q quits") {
		t.Fatalf("after Ctrl-C, want the screen as before watch:\n%s", screen)
	}
}

// plainWatch starts dlock watch args with stdout a pipe. Its waitLine
// returns the first line holding every word, failing the test after 15s or
// on an escape sequence; its stop sends SIGINT and waits for exit 0.
func plainWatch(t *testing.T, url string, args ...string) (waitLine func(what string, words ...string) string, stop func()) {
	t.Helper()
	cmd := exec.Command(dlockBin, append([]string{"watch", "--interval", "100ms"}, args...)...)
	cmd.Env = append(os.Environ(), "REDIS_URL="+url)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string)
	go func() {
		defer close(lines)
		for scan := bufio.NewScanner(stdout); scan.Scan(); {
			lines <- scan.Text()
		}
	}()
	waitLine = func(what string, words ...string) string {
		t.Helper()
		timeout := time.After(15 * time.Second)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("watch ended before a line of %s", what)
				}
				if strings.Contains(line, "\033") {
					t.Fatalf("an escape sequence in a plain line: %q", line)
				}
				found := true
				for _, w := range words {
					found = found && strings.Contains(line, w)
				}
				if found {
					return line
				}
			case <-timeout:
				t.Fatalf("no line of %s within 15s", what)
			}
		}
	}
	stop = func() {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		for range lines { // to the end of its output
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("watch after SIGINT: %v; want exit 0", err)
		}
	}
	return waitLine, stop
}

// With stdout not a terminal, watch prints a plain line for each change: a
// lock taken, released; no escape sequences. SIGINT ends it, exit 0.
func TestWatch_PrintsPlainLinesWhenNotATerminal(t *testing.T) {
	url, locks := testRedis(t)
	waitLine, stop := plainWatch(t, url, "plain*")
	ctx := context.Background()
	lease, err := locks.Mutex("plain-1").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitLine("plain-1 held", "plain-1", "held", "ttl=")
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	waitLine("plain-1 released", "plain-1", "free")
	stop()
}

// Issue 36 (F2): a plain line quotes the holders once, as Go quotes a
// string: a rune that does not print is escaped once (\x1b), not twice
// (\\x1b), so that strconv.Unquote gives the holders back.
func TestWatch_PlainLinesEscapeTheHoldersOnce(t *testing.T) {
	url, locks := testRedis(t)
	waitLine, stop := plainWatch(t, url, "hostile")
	hostile := admin.HolderInfo{Hostname: "h\x1b[2J \"x\"", PID: 7}
	mustLease(t)(locks.RWMutex("hostile", dlock.WithHolderInfo(hostile)).Lock(context.Background()))
	line := waitLine("hostile held", "hostile", "held")
	want := `holders="h\x1b[2J \"x\" pid 7 write"`
	if !strings.Contains(line, want) {
		t.Fatalf("watch's plain line:\n%s\nwant the holders quoted once: %s", line, want)
	}
	stop()
}

// Issue 36.8: when Redis stalls, watch says its refresh failed within a
// couple of seconds instead of showing a stale screen, and q still quits.
func TestWatch_AStalledRedisIsShownAndQStillQuits(t *testing.T) {
	srv := redistest.Start(t)
	term := startTerminal(t, fmt.Sprintf("%s watch --redis redis://%s --interval 200ms 'job*'\necho \"watch-exit:$?\"\nsleep 600\n",
		dlockBin, srv.Addr()))
	term.waitScreen("q quits")
	srv.Pause()
	t.Cleanup(srv.Resume)
	stalled := time.Now()
	term.waitScreen("refresh failed")
	if took := time.Since(stalled); took > 4*time.Second {
		t.Fatalf("refresh failed shown %v after Redis stalled, want within 4s", took)
	}
	// A refresh is in flight again by now, stuck on the stalled server.
	term.tmux("send-keys", "q")
	quit := time.Now()
	term.waitScreen("watch-exit:0")
	if took := time.Since(quit); took > time.Second {
		t.Fatalf("q took %v to end watch, want well under a second", took)
	}
}
