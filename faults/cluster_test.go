//go:build faults

package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// contendOnCluster runs workers on one lock of cluster c, each its own
// cluster client, while fault runs once a quarter of the way in (given
// the lock's slot). It returns the counts and the lock's name.
func contendOnCluster(t *testing.T, c *redistest.Cluster, workers, per int, opts []dlock.Option, fault func(slot int)) (*holders, string) {
	ctx := ctxFor(t, 3*time.Minute)
	name := lockName(t)
	mutexes := make([]*dlock.Mutex, workers)
	for w := range mutexes {
		// go-redis's default retries: they follow TRYAGAIN during a
		// migration and a dead node's replacement, as users' clients do.
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ReadTimeout: 300 * time.Millisecond,
			Username: aclUser, Password: aclPassword})
		t.Cleanup(func() { _ = rdb.Close() })
		mutexes[w] = newClient(t, rdb, opts...).Mutex(name)
	}
	slot := int(c.Client().ClusterKeySlot(ctx, lockKey(name)).Val())
	var h holders
	h.runThrough(ctx, workers, per, 2*time.Millisecond, func(ctx context.Context, w int) (*dlock.Lease, error) {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return mutexes[w].Lock(actx)
	}, func() { fault(slot) })
	return &h, name
}

// (13a) Resharding under load: the lock's slot moves to another master
// and back, keys in batches, while clients contend (ASK redirections, and
// TRYAGAIN for scripts whose keys are split). Pass: no overlap, tokens in
// order, the lock free at the end.
func TestScenario13_ClusterSlotMigration(t *testing.T) {
	workers, per := 4, sized(60, 400)
	c := redistest.StartCluster(t, clusterUser()...)
	moves := 0
	h, name := contendOnCluster(t, c, workers, per, []dlock.Option{dlock.WithTTL(time.Second)}, func(slot int) {
		ctx := ctxFor(t, time.Minute)
		for range 4 {
			owner, err := c.SlotOwner(ctx, slot)
			if err != nil {
				t.Error(err)
				return
			}
			if err := c.MigrateSlot(ctx, slot, (owner+1)%len(c.Nodes), func() { <-time.After(20 * time.Millisecond) }); err != nil {
				t.Error(err)
				return
			}
			moves++
		}
	})
	r := h.row("13 Cluster: the lock's slot migrated 4 times under load")
	r.Orphans = orphans(ctxFor(t, time.Minute), c.Client(), name, time.Second)
	r.Note = fmt.Sprintf("%d migrations; %s", moves, h.failureNote())
	report(t, r)
	h.expectAll(t, workers*per)
}

// (13b) Failover of the lock's master (SIGKILL; its replica promoted)
// under load. Replication is asynchronous: without WithReplicaAck a grant
// the replica had not received is lost with the master, and a second
// holder may enter (the documented failure mode). With WithReplicaAck(1,
// …) every grant is on the replica before it is returned. Pass with ack:
// no overlap, tokens in order.
func TestScenario13_ClusterFailover(t *testing.T) {
	t.Parallel()
	workers, per := 4, sized(60, 400)
	for _, ack := range []bool{false, true} {
		c := redistest.StartReplicatedCluster(t, clusterUser("+wait")...)
		opts := []dlock.Option{dlock.WithTTL(time.Second), dlock.WithDriftFactor(0.1)}
		what, allow := "without replica ack", []string{"overlaps", "out of order"}
		if ack {
			opts = append(opts, dlock.WithReplicaAck(1, 200*time.Millisecond))
			what, allow = "with WithReplicaAck(1, 200ms)", nil
		}
		var took time.Duration
		h, _ := contendOnCluster(t, c, workers, per, opts, func(slot int) {
			ctx := ctxFor(t, time.Minute)
			owner, err := c.SlotOwner(ctx, slot)
			if err != nil {
				t.Error(err)
				return
			}
			started := time.Now()
			if err := c.FailOver(ctx, owner); err != nil {
				t.Error(err)
			}
			took = time.Since(started)
		})
		r := h.row("13 Cluster: the lock's master killed and failed over, " + what)
		r.Note = fmt.Sprintf("failover took %v; %s", took.Round(10*time.Millisecond), h.failureNote())
		report(t, r, allow...)
		h.expectAll(t, workers*per)
	}
}

// clusterUser is the configuration that gives every cluster node dlock's
// ACL user, restarts included, with extra rules.
func clusterUser(extra ...string) []string {
	return redistest.UserArgs(aclUser, aclPassword, append(append([]string(nil), redistest.ClusterACL...), extra...))
}
