package dlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/internal/inspect"
	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
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
	err := inspect.EachNode(ctx, c.rdb, func(ctx context.Context, addr string, node redis.Cmdable) {
		problems, _ := inspect.Node(ctx, node)
		mu.Lock()
		defer mu.Unlock()
		report.Nodes = append(report.Nodes, admin.NodeReport{Addr: addr, Problems: problems})
	})
	if err = cmp.Or(err, ctx.Err()); err != nil {
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
			problems, _ := inspect.Node(ctx, n.rdb)
			report.Nodes[i] = admin.NodeReport{Addr: n.addr, Problems: problems}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dlock: check: %w", err)
	}
	return report, nil
}

// Describe reports who holds the lock called name, whatever its type, how
// long it has left and who waits, in one round trip that changes nothing.
// It looks under the Client's prefix, or opts' [WithPrefix]; other options
// fail with [ErrInvalid]. A key of the name holding what dlock did not
// write fails it with [ErrWrongType], naming the key.
func (c *Client) Describe(ctx context.Context, name string, opts ...Option) (admin.LockInfo, error) {
	k, err := c.namedKeys(ctx, name, opts)
	if err != nil {
		return admin.LockInfo{}, err
	}
	reply, err := fcall.Run(ctx, &c.fns, c.rdb, scripts.Describe, scripts.AnyLockLayout.Keys(k.lock), scripts.OwnerArgs{Owner: ""}).Slice()
	var info admin.LockInfo
	if err == nil {
		switch kind, _ := reply[0].(string); kind {
		case "mutex":
			info, err = inspect.MutexInfo(reply[1:])
		case "semaphore":
			info, err = inspect.SemaphoreInfo(reply[1:])
		default:
			info, err = parseRWInfo(reply)
		}
	}
	if err != nil {
		return admin.LockInfo{}, redisError("describe", name, err)
	}
	info.Name = name
	return info, nil
}

// parseRWInfo reads describe.lua's reply for a read-write lock, or a name
// nothing holds: rw_state's (rw_lib.lua).
func parseRWInfo(reply []any) (admin.LockInfo, error) {
	s, reentrant, err := parseHoldState(reply)
	if err != nil {
		return admin.LockInfo{}, err
	}
	info := admin.LockInfo{Holders: s.Holders, TTL: s.TTL, WritersWaiting: s.WritersWaiting,
		ReadersWaiting: s.ReadersWaiting, LastToken: s.LastToken}
	switch {
	case len(s.Holders) == 0:
	case s.ReadHolds > 0:
		info.Kind = observe.KindRead
	case reentrant:
		info.Kind = observe.KindReentrant
	default:
		info.Kind = observe.KindWrite
	}
	return info, nil
}

// ForceUnlock removes the lock called name whatever holds it (any type,
// every permit) and wakes its waiters: the escape hatch for a holder known
// to be gone. It reports whether anything was held. The holders' leases
// learn of the loss at their next renewal; fencing covers them until then,
// as the counter is kept. A key dlock did not write fails it with
// [ErrWrongType], and nothing is removed. Options are as [Client.Describe]'s.
func (c *Client) ForceUnlock(ctx context.Context, name string, opts ...Option) (bool, error) {
	k, err := c.namedKeys(ctx, name, opts)
	if err != nil {
		return false, err
	}
	publish, err := c.publishCommand(ctx)
	if err != nil {
		return false, err
	}
	n, err := fcall.Run(ctx, &c.fns, c.rdb, scripts.ForceUnlock, scripts.AnyLockLayout.Keys(k.lock), scripts.PublishArgs{Publish: publish}).Int64()
	if err != nil {
		return false, redisError("force unlock", name, err)
	}
	return n == 1, nil
}

// namedKeys are the keys of the lock called name, checked before any I/O.
func (c *Client) namedKeys(ctx context.Context, name string, opts []Option) (keys, error) {
	if err := c.usable(ctx); err != nil {
		return keys{}, err
	}
	cfg := c.cfg.with(opts)
	err := validateName(name)
	if err == nil {
		err = cfg.validate(forDescribe)
	}
	return keysFor(cfg.prefix, name), err
}
