package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

const watchUsage = `Usage: dlock watch [--interval duration] [--limit N] [PATTERN|NAME]

A live view of the locks whose names match PATTERN (a Redis glob, as for
dlock ls; default every name), or of the one lock NAME (shown even while
free): their holders, waiters and TTLs counting down, refreshed every
--interval. In a terminal it redraws a screen of its own in place; q or
Ctrl-C ends it and gives the terminal back as it was. When stdout is not a
terminal it prints a plain line for each change instead: a lock taken,
handed over, released (its state, TTL, waiters, token and holders).

ACQ/S counts, per second over the last 10 seconds, the refreshes in which
the lock's fencing token moved: a lower bound of its acquisitions and
hand-overs. Tokens are clock readings, not counts, so several acquisitions
between two refreshes count as one.

Examples:
  dlock watch
  dlock watch 'deploy:*'
  dlock watch --interval 200ms nightly-report
  dlock watch 'jobs:*' > watch.log

Exit codes: 0 ended by q or a signal; 2 bad flags or arguments; 69 Redis
could not be reached or failed; 77 Redis refused the login or a command.
Once started, a refresh that fails is shown and retried, not an exit; one
that takes longer than --interval or 2s (a stalled Redis) fails.
`

// minWatchInterval bounds how hard watch asks Redis.
const minWatchInterval = 100 * time.Millisecond

// minRefreshTimeout bounds a refresh (or --interval, if longer): a stalled
// Redis is then shown as a failed refresh, not as a stale screen.
const minRefreshTimeout = 2 * time.Second

// rateWindow is how far back ACQ/S looks.
const rateWindow = 10 * time.Second

func defineWatch(fs *flag.FlagSet) action {
	redisFlag := fs.String("redis", "", redisFlagUsage)
	interval := fs.Duration("interval", time.Second, "refresh every `duration`")
	limit := fs.Int("limit", defaultLsLimit, "show `N` locks at most, the first by name")
	return func(ctx context.Context, fs *flag.FlagSet, out *output) int {
		w := &watcher{query: lockQuery{pattern: "*", limit: *limit}, interval: *interval}
		switch {
		case fs.NArg() > 1:
			return usageError(out, "watch", "want at most one PATTERN or NAME")
		case *interval < minWatchInterval:
			return usageError(out, "watch", "--interval must be at least %v", minWatchInterval)
		case fs.NArg() == 1:
			w.query.pattern = fs.Arg(0)
		}
		if code, bad := checkQuery(out, "watch", w.query); bad {
			return code
		}
		if !strings.ContainsAny(w.query.pattern, `*?[\`) {
			w.name = w.query.pattern // no glob: one lock, shown even while free
		}
		return w.run(ctx, *redisFlag, out)
	}
}

// watcher is one dlock watch: what it shows, and what it saw.
type watcher struct {
	query    lockQuery
	name     string // the one lock watched, when a NAME was given; else ""
	interval time.Duration

	client    *dlock.Client
	rdb       redis.UniversalClient
	tokens    map[string][]tokenSeen // by lock name, the last rateWindow's
	printed   map[string]string      // plain lines: the last line of each lock shown
	lastError string                 // plain lines: the refresh's error last printed, until one succeeds
}

// tokenSeen is a lock's last fencing token at one refresh.
type tokenSeen struct {
	at    time.Time
	token uint64
}

func (w *watcher) run(ctx context.Context, redisFlag string, out *output) int {
	client, rdb, done, code := openClient(ctx, "watch", redisFlag, out)
	if client == nil {
		return code
	}
	defer done()
	w.client, w.rdb = client, rdb
	w.tokens, w.printed = map[string][]tokenSeen{}, map[string]string{}
	var screen *terminalScreen
	var quit <-chan struct{} // q pressed; never without a terminal
	if out.screen != nil {
		var restore func()
		screen, restore = enterScreen(out.screen, out.keyboard)
		defer restore()
		quit = screen.quit
	}
	ticker := time.NewTicker(w.interval)
	defer ticker.Stop()
	for {
		// Not waited for past a signal or q: go-redis's read of a stalled
		// server ends at its deadline, not when its context is cancelled.
		refreshed := make(chan refreshResult, 1)
		go func() {
			refreshCtx, stop := context.WithTimeout(ctx, max(w.interval, minRefreshTimeout))
			defer stop()
			found, err := w.refresh(refreshCtx)
			refreshed <- refreshResult{found, err}
		}()
		var found foundLocks
		var err error
		select {
		case <-ctx.Done():
			return 0 // a signal: the way to end a watch
		case <-quit:
			return 0
		case r := <-refreshed:
			found, err = r.found, r.err
		}
		if screen != nil {
			w.draw(screen, found, err)
		} else {
			w.printChanges(out, found, err)
		}
		select {
		case <-ctx.Done():
			return 0
		case <-quit:
			return 0
		case <-ticker.C:
		}
	}
}

type refreshResult struct {
	found foundLocks
	err   error
}

// refresh finds the locks shown, and notes their tokens.
func (w *watcher) refresh(ctx context.Context) (foundLocks, error) {
	var found foundLocks
	var err error
	if w.name != "" {
		found.locks, err = describeAll(ctx, w.client, []string{w.name})
	} else {
		found, err = findLocks(ctx, w.client, w.rdb, w.query)
	}
	if err != nil {
		return found, err
	}
	now := time.Now()
	shown := map[string]bool{}
	for _, l := range found.locks {
		name := l.info.Name
		if l.notDlocks != nil {
			continue // no token: no rate
		}
		shown[name] = true
		seen := append(w.tokens[name], tokenSeen{at: now, token: l.info.LastToken})
		for len(seen) > 1 && now.Sub(seen[0].at) > rateWindow {
			seen = seen[1:]
		}
		w.tokens[name] = seen
	}
	for name := range w.tokens {
		if !shown[name] {
			delete(w.tokens, name)
		}
	}
	return found, nil
}

// rate is the lock's ACQ/S: the refreshes in the window in which its token
// moved, per second; "-" until two refreshes have seen it.
func (w *watcher) rate(name string) string {
	seen := w.tokens[name]
	if len(seen) < 2 {
		return "-"
	}
	moved := 0
	for i := 1; i < len(seen); i++ {
		if seen[i].token != seen[i-1].token {
			moved++
		}
	}
	return fmt.Sprintf("%.1f", float64(moved)/seen[len(seen)-1].at.Sub(seen[0].at).Seconds())
}

// draw redraws the terminal's screen: a title, the locks' table, and what
// did not fit, each line cut to the terminal's width so none wraps.
func (w *watcher) draw(screen *terminalScreen, found foundLocks, err error) {
	width, height := screen.size()
	what := "every lock held or waited for"
	if w.name != "" {
		what = "the lock " + w.name
	} else if w.query.pattern != "*" {
		what = "locks matching " + w.query.pattern
	}
	lines := []string{fmt.Sprintf("dlock watch: %s, every %v, %s   (q quits)", what, w.interval, time.Now().Format("15:04:05")), ""}
	var footer []string
	switch {
	case err != nil:
		footer = append(footer, fmt.Sprintf("refresh failed: %v (retrying)", err))
	case len(found.locks) == 0:
		lines = append(lines, "no lock is held or waited for")
	default:
		var table bytes.Buffer
		printLocks(&table, found.locks, func(name string) string {
			if name == "" {
				return "ACQ/S"
			}
			return w.rate(name)
		})
		lines = append(lines, strings.Split(strings.TrimRight(table.String(), "\n"), "\n")...)
	}
	if found.cut {
		footer = append(footer, fmt.Sprintf("cut at %d locks: narrow the PATTERN or raise --limit", w.query.limit))
	}
	if room := height - len(footer) - 1; len(lines) > room && room > 2 {
		hidden := len(lines) - (room - 1)
		lines = append(lines[:room-1], fmt.Sprintf("… %d more below: narrow the PATTERN", hidden))
	}
	lines = append(lines, footer...)
	var frame strings.Builder
	frame.WriteString("\033[H") // home; each line then clears what was left of the last frame's
	for _, line := range lines {
		frame.WriteString(cutTo(line, width) + "\033[K\n")
	}
	frame.WriteString("\033[J") // and below
	screen.write(frame.String())
}

// printChanges prints a plain line for each lock whose state, waiters,
// token or holders changed since the last refresh, and one saying free for
// each that is no longer shown.
func (w *watcher) printChanges(out *output, found foundLocks, err error) {
	now := time.Now().UTC().Format(time.RFC3339)
	if err != nil {
		if err.Error() != w.lastError { // once, not every refresh while it lasts
			w.lastError = err.Error()
			fmt.Fprintf(out.stderr, "%s dlock watch: refresh failed: %v (retrying)\n", now, err)
		}
		return
	}
	w.lastError = ""
	shown := map[string]bool{}
	for _, l := range found.locks {
		shown[l.info.Name] = true
		line := plainLine(l)
		if w.printed[l.info.Name] != line {
			w.printed[l.info.Name] = line
			fmt.Fprintf(out.stdout, "%s %s ttl=%s\n", now, line, ttlText(l.info.TTL))
		}
	}
	for name := range w.printed {
		if !shown[name] {
			delete(w.printed, name)
			fmt.Fprintf(out.stdout, "%s %s free\n", now, printable(name))
		}
	}
}

// plainLine is a lock's columns but its TTL, which changes every refresh.
// The holders are quoted as Go quotes a string, which escapes them once.
func plainLine(l foundLock) string {
	c, holders := l.columns(), "-"
	if l.notDlocks == nil {
		holders = holdersText(l.info)
	}
	return fmt.Sprintf("%s %s type=%s waiting=%s token=%s holders=%q", c[0], c[2], c[1], c[4], c[5], holders)
}
