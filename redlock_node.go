package dlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// redlockNode is one master of a Redlock, and what the restart guard knows
// of it.
type redlockNode struct {
	index int
	rdb   redis.UniversalClient
	addr  string

	dials atomic.Int64 // connections opened to it: a restart makes new ones

	mu         sync.Mutex
	checked    int64  // dials when its run_id was last read
	runID      string // "" until first read
	recovering time.Time
}

var errRecovering = errors.New("restarted less than the longest TTL ago: it does not vote yet")

func newRedlockNode(index int, rdb redis.UniversalClient) *redlockNode {
	n := &redlockNode{index: index, rdb: rdb, addr: strconv.Itoa(index)}
	if c, ok := rdb.(*redis.Client); ok {
		n.addr = c.Options().Addr
	}
	rdb.AddHook(dialCounter{n})
	return n
}

// dialCounter counts the connections a node's client opens, so that a
// reconnection, which a restart forces, gets the node's run_id read again.
type dialCounter struct{ n *redlockNode }

func (h dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err == nil {
			h.n.dials.Add(1)
		}
		return conn, err
	}
}

func (h dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// mayVote reports whether the node's grant counts toward a quorum: not
// while it is recovering from a restart within the longest TTL in use.
// After a new connection it reads the node's run_id and uptime first (one
// INFO round trip, only then).
func (n *redlockNode) mayVote(ctx context.Context, longest time.Duration) error {
	dials := n.dials.Load()
	n.mu.Lock()
	fresh := dials != n.checked
	n.mu.Unlock()
	if fresh {
		info, err := n.rdb.Info(ctx, "server").Result()
		var reply redis.Error
		if errors.As(err, &reply) {
			// Not a Redis that tells its run_id (an in-process fake such as
			// miniredis): there is no restart to guard against to be seen.
			n.mu.Lock()
			n.checked = dials
			n.mu.Unlock()
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading its run_id: %w", err)
		}
		runID, uptime := infoField(info, "run_id"), infoField(info, "uptime_in_seconds")
		seconds, err := strconv.ParseInt(uptime, 10, 64)
		if runID == "" || err != nil {
			return fmt.Errorf("reading its run_id: %w", errUnexpectedReply)
		}
		up := time.Duration(seconds) * time.Second
		n.mu.Lock()
		if n.runID != "" && n.runID != runID && up < longest {
			n.recovering = time.Now().Add(longest - up)
		}
		n.runID, n.checked = runID, dials
		n.mu.Unlock()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if time.Now().Before(n.recovering) {
		return errRecovering
	}
	return nil
}

func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// errNoAnswer is a node that did not answer within the node timeout.
var errNoAnswer = fmt.Errorf("no answer within the node timeout: %w", context.DeadlineExceeded)

// onNodes runs f on every node at once and returns what each returned
// within timeout; a node that has not answered by then counts as
// errNoAnswer. It does not wait for such a node: go-redis bounds a call by
// its context only with ContextTimeoutEnabled, else by its ReadTimeout, and
// the caller's client may have either.
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
	errs := make([]error, len(nodes))
	for i := range errs {
		errs[i] = errNoAnswer
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
collect:
	for range nodes {
		select {
		case a := <-answers:
			vals[a.i], errs[a.i] = a.v, a.err
		case <-timer.C:
			break collect
		}
	}
	return vals, errs
}

// nodeErrors names the nodes whose call failed.
func nodeErrors(nodes []*redlockNode, errs []error) []*NodeError {
	var out []*NodeError
	for i, err := range errs {
		if err != nil {
			out = append(out, &NodeError{Node: nodes[i].index, Addr: nodes[i].addr, Err: err})
		}
	}
	return out
}

func succeeded(errs []error) int {
	n := 0
	for _, err := range errs {
		if err == nil {
			n++
		}
	}
	return n
}
