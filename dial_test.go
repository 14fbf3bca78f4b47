package dlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// hookRebuilds is a go-redis hook that counts its DialHook calls: go-redis
// calls each hook's once for every hook added after it.
type hookRebuilds struct{ n atomic.Int64 }

func (h *hookRebuilds) DialHook(next redis.DialHook) redis.DialHook          { h.n.Add(1); return next }
func (h *hookRebuilds) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *hookRebuilds) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// newAndClose makes and closes n Clients on rdb, as a program that makes
// one per request might.
func newAndClose(t *testing.T, rdb redis.UniversalClient, n int) {
	for range n {
		c, err := dlock.New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}
}

// New adds one hook to a go-redis client however many Clients are made on
// it: go-redis copies its hook list at each addition and every dial passes
// through each hook, so a hook per Client cost quadratic time and a
// wrapper per Client on each dial. A Cluster client's node clients
// likewise.
func TestNew_AddsOneDialHookPerRedisClient(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: deadAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	probe := &hookRebuilds{}
	rdb.AddHook(probe)
	newAndClose(t, rdb, 100)
	if added := probe.n.Load() - 1; added != 1 {
		t.Errorf("100 New+Close on one Client added %d hooks after the probe; want 1", added)
	}

	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{deadAddr(t)}, MaxRedirects: -1})
	t.Cleanup(func() { _ = cluster.Close() })
	nodeProbe := &hookRebuilds{}
	cluster.OnNewNode(func(node *redis.Client) { node.AddHook(nodeProbe) })
	newAndClose(t, cluster, 100)
	ctx, cancel := context.WithTimeout(ctxFor(t, time.Minute), 100*time.Millisecond)
	defer cancel()
	_ = cluster.Ping(ctx).Err() // makes the seed's node client, whose dial fails
	if added := nodeProbe.n.Load() - 1; added != 1 {
		t.Errorf("100 New+Close on one ClusterClient added %d hooks to its node after the probe; want 1", added)
	}
}
