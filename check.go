package dlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/inspect"
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
