package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/admin"
)

// Check asks every master the Client reaches what in its configuration
// weakens dlock's guarantees, and reports per node. It fails only when the
// Client is unusable, ctx ends, or a cluster's layout cannot be read. The
// Client also checks each node once by itself from its first use, and logs
// what it finds ([WithLogger]).
func (c *Client) Check(ctx context.Context) (*admin.Report, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	var mu sync.Mutex
	report := &admin.Report{}
	err := c.forEachNode(ctx, func(ctx context.Context, addr string, node redis.Cmdable) {
		problems, _ := inspectNode(ctx, node)
		mu.Lock()
		defer mu.Unlock()
		report.Nodes = append(report.Nodes, admin.NodeReport{Addr: addr, Problems: problems})
	})
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("dlock: check: %w", err)
	}
	slices.SortFunc(report.Nodes, func(a, b admin.NodeReport) int { return strings.Compare(a.Addr, b.Addr) })
	return report, nil
}

// Check inspects every node of the Redlock as [Client.Check] does, in the
// order given to [NewRedlock]. A Redlock does not check its nodes by
// itself: call it at start.
func (r *Redlock) Check(ctx context.Context) (*admin.Report, error) {
	if r == nil || r.nodes == nil {
		return nil, invalidf("a Redlock not made by NewRedlock")
	}
	report := &admin.Report{Nodes: make([]admin.NodeReport, len(r.nodes))}
	var wg sync.WaitGroup
	for i, n := range r.nodes {
		wg.Go(func() {
			problems, _ := inspectNode(ctx, n.rdb)
			report.Nodes[i] = admin.NodeReport{Addr: n.addr, Problems: problems}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dlock: check: %w", err)
	}
	return report, nil
}

// forEachNode calls f on every master, at once on a cluster or ring.
func (c *Client) forEachNode(ctx context.Context, f func(ctx context.Context, addr string, node redis.Cmdable)) error {
	each := func(ctx context.Context, node *redis.Client) error {
		f(ctx, node.Options().Addr, node)
		return nil
	}
	switch rdb := c.rdb.(type) {
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

// inspectNode runs the checks on one node. reached is false when the node
// could not be asked (a network error, a timeout).
func inspectNode(ctx context.Context, node redis.Cmdable) (problems []admin.Problem, reached bool) {
	info, err := node.Info(ctx, "memory").Result()
	if err != nil {
		reason := "cannot read INFO: " + err.Error() + "; maxmemory-policy not checked"
		if isPermission(err) {
			reason += " (grant the user +info)"
		}
		var reply redis.Error
		return []admin.Problem{{Check: admin.CheckInfo, Severity: admin.SeverityWarning, Reason: reason}}, errors.As(err, &reply)
	}
	policy, maxmemory := infoField(info, "maxmemory_policy"), infoField(info, "maxmemory")
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

// How the Client checks its nodes by itself: a round at most
// nodeCheckTimeout long, and from nodeRecheck later a round for masters not
// checked yet (a failover, a resharding).
const (
	nodeCheckTimeout = 10 * time.Second
	nodeRecheck      = time.Minute
)

// nodeWatch is the Client's own check of its nodes. A round starts at a use
// of the Client (see Client.usable), in a goroutine of its own so that no
// lock waits for it. Its fields but seen are guarded by Client.mu.
type nodeWatch struct {
	due  bool               // a round starts at the next use
	next time.Time          // as at every use from then (zero: none)
	stop context.CancelFunc // cancels the running round; nil: none ran
	done chan struct{}      // closed when the latest round has ended

	mu   sync.Mutex
	seen map[string]bool // nodes checked, and logged about, by address; made by New
}

// watchNodes starts a round of checks when one is due. The caller holds
// c.mu, with the Client open.
func (c *Client) watchNodes() {
	w := &c.watch
	if !w.due && (w.next.IsZero() || time.Now().Before(w.next)) {
		return
	}
	if w.done != nil {
		select {
		case <-w.done:
		default:
			return // one round at a time
		}
	}
	w.due = false
	ctx, cancel := context.WithTimeout(context.Background(), nodeCheckTimeout)
	w.stop, w.done = cancel, make(chan struct{})
	go c.checkNodes(ctx, cancel, w.done)
}

func (c *Client) checkNodes(ctx context.Context, cancel context.CancelFunc, done chan struct{}) {
	defer close(done)
	defer cancel()
	w := &c.watch
	_ = c.forEachNode(ctx, func(ctx context.Context, addr string, node redis.Cmdable) {
		w.mu.Lock()
		seen := w.seen[addr]
		w.mu.Unlock()
		if seen {
			return
		}
		problems, reached := inspectNode(ctx, node)
		if !reached { // down or slow: the next round asks again
			return
		}
		w.mu.Lock()
		w.seen[addr] = true
		w.mu.Unlock()
		for _, p := range problems {
			level := c.cfg.logger.Warn
			if p.Severity >= admin.SeverityError {
				level = c.cfg.logger.Error
			}
			level("dlock: a Redis node weakens what locks guarantee", "node", addr, "check", p.Check, "reason", p.Reason)
		}
	})
	c.mu.Lock()
	w.next = time.Now().Add(nodeRecheck)
	c.mu.Unlock()
}

// stopWatch ends the check of the nodes, once the Client is marked closed.
func (c *Client) stopWatch(deadline time.Time) {
	c.mu.Lock()
	stop, done := c.watch.stop, c.watch.done
	c.mu.Unlock()
	if stop != nil {
		stop()
		waitUntil(done, deadline) // an INFO stuck on a stalled server, with no read timeout, ends later
	}
}
