package dlock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// A stalled cluster master holds up the renewals of the leases it serves,
// and only those: a short lease on a healthy master stays held for many
// TTLs while another master answers nothing.
func TestLease_StalledClusterMasterCostsNoLeaseOnTheOthers(t *testing.T) {
	// Without full coverage, the healthy masters go on serving their slots
	// once the stalled one is marked failed, as a cluster configured to stay
	// up does.
	cl := redistest.StartCluster(t, "--cluster-require-full-coverage", "no")
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = rdb.Close() })
	const ttl = 600 * time.Millisecond // renewed every 200 ms: 400 ms to spare on a loaded machine
	c := newClient(t, rdb, dlock.WithTTL(ttl))
	ctx := ctxFor(t, 60*time.Second)

	nameOn := func(node int) string {
		for {
			name := lockName(t)
			owner, err := cl.SlotOwner(ctx, dlock.ClusterSlot(name))
			if err != nil {
				t.Fatal(err)
			}
			if owner == node {
				return name
			}
		}
	}
	// Scripts loaded before the stall: this test is about renewals alone
	// (the one below, about loading them while a master stalls).
	warm, err := c.Mutex(nameOn(0)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	healthy, err := c.Mutex(nameOn(0)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stalled, err := c.Mutex(nameOn(1)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cl.Nodes[1].Pause()
	t.Cleanup(cl.Nodes[1].Resume) // before the cluster's own clean-up stops it

	waitDone(t, stalled.Done(), lossGuard, "loss of the lease on the stalled master")
	select {
	case <-healthy.Done():
		t.Fatalf("the lease on a healthy master was lost while another master stalled: %v", healthy.Err())
	case <-time.After(15 * ttl): // the property: still held after 15 TTLs
	}
	if err := healthy.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the lease on the healthy master: %v", err)
	}
}

// The same after SCRIPT FLUSH (or a master promoted without the scripts):
// a renewal that meets NOSCRIPT loads the scripts again, and that must not
// wait on a stalled master that serves none of its locks (issue 17's soak,
// seed 1795696030340723881: an Election's lease lost on a healthy master
// while its renewal's SCRIPT LOAD waited on a paused one).
func TestLease_StalledClusterMasterCostsNoLeaseOnTheOthersAfterAScriptFlush(t *testing.T) {
	cl := redistest.StartCluster(t, "--cluster-require-full-coverage", "no")
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = rdb.Close() })
	const ttl = 600 * time.Millisecond
	c := newClient(t, rdb, dlock.WithTTL(ttl))
	ctx := ctxFor(t, 60*time.Second)
	var name string
	for {
		name = lockName(t)
		owner, err := cl.SlotOwner(ctx, dlock.ClusterSlot(name))
		if err != nil {
			t.Fatal(err)
		}
		if owner == 0 {
			break
		}
	}
	healthy, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range cl.Nodes {
		if err := forgetScripts(ctx, n.Client()); err != nil {
			t.Fatal(err)
		}
	}
	cl.Nodes[1].Pause()
	t.Cleanup(cl.Nodes[1].Resume) // before the cluster's own clean-up stops it
	select {
	case <-healthy.Done():
		t.Fatalf("the lease on a healthy master was lost while another master stalled, after SCRIPT FLUSH: %v", healthy.Err())
	case <-time.After(5 * ttl):
	}
	cl.Nodes[1].Resume()
	if err := healthy.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the lease on the healthy master: %v", err)
	}
}

// Scripts are loaded only on the masters that ran a call that met
// NOSCRIPT, so a slot moved by a resharding lands on a master that may
// never have run its lock type's. A renewal there meets NOSCRIPT right
// after following MOVED, while the client's map still names the old
// master: that must not make it wait on a stalled master that serves none
// of its locks (no SCRIPT FLUSH here: a resharding is enough).
//
// It failed between b324951 and d069a6e (and passed before b324951, which
// loaded every type's scripts on every master at its first NOSCRIPT): the
// load went to the old master (the stale map), the call met NOSCRIPT
// again, and the loads on every master (ForEachMaster, which with a live
// map also reloads it from a node at random, the stalled one maybe) waited
// on the stalled one past the lease's deadline. The calls now go again as
// each master's load ends.
func TestLease_StalledClusterMasterCostsNoLeaseOnTheOthersWhenItsSlotMoves(t *testing.T) {
	cl := redistest.StartCluster(t, "--cluster-require-full-coverage", "no")
	ctx := ctxFor(t, time.Minute)
	name, slot, rdb := onStaleMap(ctx, t, cl)
	const ttl = 600 * time.Millisecond
	c := newClient(t, rdb, dlock.WithTTL(ttl))
	lease, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cl.Nodes[2].Pause()
	t.Cleanup(cl.Nodes[2].Resume)
	// The slot, with the lock, moves from master 0 to master 1, which the
	// stalled master 2 hears of later (redistest's MigrateSlot would wait
	// to tell it).
	src, dst := cl.Nodes[0].Client(), cl.Nodes[1].Client()
	do := func(rdb *redis.Client, args ...any) {
		t.Helper()
		if err := rdb.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	srcID, dstID := src.ClusterMyID(ctx).Val(), dst.ClusterMyID(ctx).Val()
	do(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	do(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
	host, port, _ := strings.Cut(cl.Nodes[1].Addr(), ":")
	migrate := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	for _, k := range src.ClusterGetKeysInSlot(ctx, slot, 100).Val() {
		migrate = append(migrate, k)
	}
	do(src, migrate...)
	do(dst, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	do(src, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	select {
	case <-lease.Done():
		t.Fatalf("the lease on a healthy master was lost when its slot moved while another master stalled: %v", lease.Err())
	case <-time.After(5 * ttl):
	}
	cl.Nodes[2].Resume()
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the lease on the healthy master: %v", err)
	}
}
