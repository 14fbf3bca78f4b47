package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/dialwatch"
	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/internal/inspect"
)

// redlockNode is one master of a Redlock, and what the restart guard knows of it.
type redlockNode struct {
	index int
	rdb   redis.UniversalClient
	fns   fcall.Functions // how the node takes dlock's scripts
	addr  string

	preloaded atomic.Bool // dlock's scripts were loaded ahead of a vote (see Redlock.preload)

	dials  *dialwatch.Watch // connections opened to it (a restart makes new ones), and why one failed
	rights rightsSeen       // whether its acquire's rights check passed (rights.go)

	mu      sync.Mutex
	checked int64     // dials when it was last read
	seen    nodeRun   // which run of which master it was then
	upSince time.Time // the latest it can have had its data from, on this process's clock
	since   string    // what upSince counts from, for the error
}

// nodeRun tells one run of a master from another: a restart changes the
// run id; a promotion, or a sync from another master, the replication id.
type nodeRun struct{ runID, replID string }

var errRecovering = errors.New("restart guard: started or failed over within the guard, so it may have lost locks: it does not vote yet")

// mayVote reports whether the node's grant counts toward a quorum: once it
// has had its data for guard ([WithRestartGuard]). After a new connection
// it reads INFO: uptime, and which run of which master it is. Another run
// than before, or a promoted master, counts from when it is seen.
func (n *redlockNode) mayVote(ctx context.Context, guard time.Duration) error {
	dials := n.dials.Opened.Load()
	n.mu.Lock()
	upSince, since := n.upSince, n.since
	// Never read is fresh too: clients may come to NewRedlock connected.
	fresh := upSince.IsZero() || dials != n.checked
	n.mu.Unlock()
	if fresh {
		up, run, promoted, err := readRun(ctx, n.rdb)
		if err != nil {
			return err
		}
		received := time.Now()
		n.mu.Lock()
		switch {
		case !n.upSince.IsZero() && run == n.seen: // the run it read before
		case !n.upSince.IsZero():
			n.upSince, n.since = received, "another master than before (a restart or failover), seen"
		case promoted:
			n.upSince, n.since = received, "a master promoted (or loaded from disk) since it started, first seen"
		default:
			n.upSince, n.since = received.Add(-up), "started at least"
		}
		n.seen, n.checked = run, dials
		upSince, since = n.upSince, n.since
		n.mu.Unlock()
	}
	if up := time.Since(upSince); up < guard {
		return fmt.Errorf("%w (%s %v ago; guard %v)", errRecovering, since, up.Truncate(time.Millisecond), guard)
	}
	return nil
}

// readRun reads from INFO the node's least uptime, its run, and whether it
// was promoted (or loaded from disk) since it started. It reads the server
// and replication sections in one round trip: Redis 6 takes one per INFO.
func readRun(ctx context.Context, rdb redis.UniversalClient) (up time.Duration, run nodeRun, promoted bool, err error) {
	var server, replication *redis.StringCmd
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		server, replication = p.Info(ctx, "server"), p.Info(ctx, "replication")
		return nil
	})
	if fcall.IsPermission(err) {
		return 0, run, false, fmt.Errorf("%w: restart guard: cannot read INFO (grant +info): %w", ErrPermission, err)
	} else if err != nil {
		return 0, run, false, fmt.Errorf("restart guard: cannot read INFO: %w", err)
	}
	info := server.Val() + replication.Val()
	seconds, err := strconv.ParseInt(inspect.InfoField(info, "uptime_in_seconds"), 10, 64)
	if err != nil || seconds < 0 {
		return 0, run, false, fmt.Errorf("restart guard: cannot read INFO: no uptime_in_seconds: %w", fcall.ErrUnexpectedReply)
	}
	// uptime_in_seconds rounds both ends down, so the truth can be a second
	// shorter; server_time_usec, where given, narrows that.
	up = time.Duration(seconds-1) * time.Second
	if usec, err := strconv.ParseInt(inspect.InfoField(info, "server_time_usec"), 10, 64); err == nil && usec > 0 {
		up += time.Duration(usec%1e6) * time.Microsecond
	}
	if role := inspect.InfoField(info, "role"); role != "master" {
		return 0, run, false, fmt.Errorf("restart guard: role %q, not a master: it does not vote", role)
	}
	run = nodeRun{inspect.InfoField(info, "run_id"), inspect.InfoField(info, "master_replid")}
	if run.runID == "" || run.replID == "" {
		return 0, run, false, fmt.Errorf("restart guard: cannot read INFO: no run_id or master_replid: %w", fcall.ErrUnexpectedReply)
	}
	return max(up, 0), run, inspect.InfoField(info, "second_repl_offset") != "-1", nil
}

var errNoAnswer = fmt.Errorf("no answer within the node timeout: %w", context.DeadlineExceeded)

// onNodes runs f on every node at once and returns what each returned
// within timeout; a node that has not by then counts as errNoAnswer. It
// does not wait for it: without ContextTimeoutEnabled, go-redis may not.
func onNodes[T any](ctx context.Context, nodes []*redlockNode, timeout time.Duration,
	f func(context.Context, *redlockNode) (T, error)) ([]T, []error) {
	type answer struct {
		i   int
		v   T
		err error
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel() // stragglers' calls end with it, or with their client's timeout
	answers := make(chan answer, len(nodes))
	for i, n := range nodes {
		go func() {
			v, err := f(ctx, n)
			answers <- answer{i, v, err}
		}()
	}
	vals := make([]T, len(nodes))
	errs := slices.Repeat([]error{errNoAnswer}, len(nodes))
	deadline := time.After(timeout)
	for range nodes {
		select {
		case a := <-answers:
			vals[a.i], errs[a.i] = a.v, a.err
		case <-deadline:
			return vals, errs
		}
	}
	return vals, errs
}

// countErrs is how many of errs match target (nil: how many succeeded).
func countErrs(errs []error, target error) int {
	n := 0
	for _, err := range errs {
		if errors.Is(err, target) {
			n++
		}
	}
	return n
}
