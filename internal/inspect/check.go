// Package inspect is what dlock shows operators: the check of a node's
// configuration, the Client's own check of its nodes ([Watch]), and the
// reading of describe.lua's replies.
package inspect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/fcall"
)

// EachNode calls f on every master of rdb, at once on a cluster or ring.
func EachNode(ctx context.Context, rdb redis.UniversalClient, f func(ctx context.Context, addr string, node redis.Cmdable)) error {
	each := func(ctx context.Context, node *redis.Client) error {
		f(ctx, node.Options().Addr, node)
		return nil
	}
	switch rdb := rdb.(type) {
	case *redis.ClusterClient:
		return rdb.ForEachMaster(ctx, each)
	case *redis.Ring:
		return rdb.ForEachShard(ctx, each)
	case *redis.Client:
		return each(ctx, rdb)
	default:
		f(ctx, fmt.Sprintf("%T", rdb), rdb)
		return nil
	}
}

// Node runs the checks on one node. reached is false when the node could
// not be asked (a network error, a timeout).
func Node(ctx context.Context, node redis.Cmdable) (problems []admin.Problem, reached bool) {
	info, err := node.Info(ctx, "memory").Result()
	if err != nil {
		reason := "cannot read INFO: " + err.Error() + "; maxmemory-policy not checked"
		if fcall.IsPermission(err) {
			reason += " (grant the user +info)"
		}
		var reply redis.Error
		return []admin.Problem{{Check: admin.CheckInfo, Severity: admin.SeverityWarning, Reason: reason}}, errors.As(err, &reply)
	}
	policy, maxmemory := InfoField(info, "maxmemory_policy"), InfoField(info, "maxmemory")
	const evicts = "Redis may evict held locks and let a second owner in; set maxmemory-policy noeviction"
	p := admin.Problem{Check: admin.CheckMaxmemoryPolicy, Severity: admin.SeverityError,
		Reason: "maxmemory-policy " + policy + " with maxmemory " + maxmemory + ": " + evicts}
	switch {
	case policy == "":
		p = admin.Problem{Check: admin.CheckInfo, Severity: admin.SeverityWarning,
			Reason: "INFO memory gives no maxmemory_policy; maxmemory-policy not checked"}
	case policy == "noeviction":
		return nil, true
	case maxmemory == "0":
		p.Severity, p.Reason = admin.SeverityWarning, "maxmemory-policy "+policy+": no maxmemory is set now, but once one is, "+evicts
	}
	return []admin.Problem{p}, true
}

// InfoField is field's value in INFO's reply; "" where it has none.
func InfoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// A Watch's round lasts at most nodeCheckTimeout; from nodeRecheck later,
// a round checks masters not checked yet (a failover, a resharding).
const (
	nodeCheckTimeout = 10 * time.Second
	nodeRecheck      = time.Minute
)

// Watch is a Client's own check of its nodes: each is checked, and logged
// about, once. A round starts at a use of the Client (Use), in a goroutine
// of its own so that no lock waits for it.
type Watch struct {
	rdb redis.UniversalClient
	log *slog.Logger

	mu   sync.Mutex
	due  bool               // a round starts at the next use
	next time.Time          // as at every use from then (zero: none)
	stop context.CancelFunc // cancels the running round
	done chan struct{}      // closed when the latest round has ended
	seen map[string]bool    // nodes checked, and logged about, by address
}

// NewWatch returns a Watch of rdb's nodes logging to log, due at first use.
func NewWatch(rdb redis.UniversalClient, log *slog.Logger) *Watch {
	done := make(chan struct{})
	close(done) // no round runs
	return &Watch{rdb: rdb, log: log, due: true, stop: func() {}, done: done, seen: make(map[string]bool)}
}

// Use starts a round of checks when one is due. The caller holds its
// Client's lock, with the Client open, so no round starts after Stop.
func (w *Watch) Use() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.due && (w.next.IsZero() || time.Now().Before(w.next)) {
		return
	}
	select {
	case <-w.done:
	default:
		return // one round at a time
	}
	w.due = false
	ctx, cancel := context.WithTimeout(context.Background(), nodeCheckTimeout)
	w.stop, w.done = cancel, make(chan struct{})
	go w.check(ctx, cancel, w.done)
}

func (w *Watch) check(ctx context.Context, cancel context.CancelFunc, done chan struct{}) {
	defer close(done)
	defer cancel()
	_ = EachNode(ctx, w.rdb, func(ctx context.Context, addr string, node redis.Cmdable) {
		w.mu.Lock()
		seen := w.seen[addr]
		w.mu.Unlock()
		if seen {
			return
		}
		problems, reached := Node(ctx, node)
		if !reached { // down or slow: the next round asks again
			return
		}
		w.mu.Lock()
		w.seen[addr] = true
		w.mu.Unlock()
		for _, p := range problems {
			level := w.log.Warn
			if p.Severity >= admin.SeverityError {
				level = w.log.Error
			}
			level("dlock: a Redis node weakens what locks guarantee", "node", addr, "check", p.Check, "reason", p.Reason)
		}
	})
	w.mu.Lock()
	w.next = time.Now().Add(nodeRecheck)
	w.mu.Unlock()
}

// Due makes a round start at the next use, as one does a while after
// each round.
func (w *Watch) Due() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.due = true
}

// Done is closed when the latest round has ended, or none ran.
func (w *Watch) Done() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done
}

// Stop cancels the running round, if any, and returns Done.
func (w *Watch) Stop() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stop()
	return w.done
}
