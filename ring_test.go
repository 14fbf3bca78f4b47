package dlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// newRing makes a go-redis Ring over servers, closed at the test's end.
func newRing(t testing.TB, servers []*redistest.Server) *redis.Ring {
	addrs := make(map[string]string, len(servers))
	for i, s := range servers {
		addrs[fmt.Sprintf("shard%d", i)] = s.Addr()
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: addrs})
	t.Cleanup(func() { _ = ring.Close() })
	return ring
}

// A Ring routes each lock by its name's hash tag to one shard, where its
// scripts run and publish: a contended Lock there waits for the release
// and takes the lock, whichever shard the name lands on.
func TestRing_ContendedLockIsWokenByTheRelease(t *testing.T) {
	servers := redistest.StartMasters(t, 3)
	ctx := ctxFor(t, time.Minute)
	holderRing, waiterRing := newRing(t, servers), newRing(t, servers)
	holder, waiter := newClient(t, holderRing), newClient(t, waiterRing)
	attempts := countAttempts(waiter)

	used := make(map[string]bool)
	for i := 0; i < 12 || len(used) < len(servers); i++ {
		if i == 100 {
			t.Fatalf("100 names landed on %d shards of %d", len(used), len(servers))
		}
		name := lockName(t)
		shard, err := holderRing.GetShardClientForKey(lockKey(name))
		if err != nil {
			t.Fatal(err)
		}
		used[shard.Options().Addr] = true

		lease, err := holder.Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		registered := attempts.registered.Load()
		result := lockInBackground(ctx, waiter.Mutex(name).Lock)
		waitDone(t, attempts.registeredReach(registered+1), 30*time.Second, "the waiter's registration")
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		expectAcquired(t, result, 30*time.Second, "the waiter was not handed the lock")
	}
	for _, s := range servers {
		if n, err := s.Client().DBSize(context.Background()).Result(); err != nil || n == 0 {
			t.Fatalf("shard %s holds %d keys (%v): the names did not spread", s.Addr(), n, err)
		}
	}
}

// Concurrent calls share pipelines, which a Ring splits by shard; on fresh
// servers every shard answers NOSCRIPT at first, and each must get the
// script before the calls are sent again.
func TestRing_ConcurrentLocksOnFreshShards(t *testing.T) {
	servers := redistest.StartMasters(t, 3)
	c := newClient(t, newRing(t, servers))
	runWorkers(t, 8, func(ctx context.Context, worker int) error {
		for i := range 5 {
			lease, err := c.Mutex(fmt.Sprintf("%s#%d.%d", t.Name(), worker, i)).Lock(ctx)
			if err != nil {
				return err
			}
			if err := lease.Unlock(ctx); err != nil {
				return err
			}
		}
		return nil
	})
}

// One stalled shard costs only its own leases: renewals go per shard, as
// they go per master on a cluster.
func TestRing_StalledShardCostsNoLeaseOnTheOthers(t *testing.T) {
	servers := redistest.StartMasters(t, 2)
	ring := newRing(t, servers)
	const ttl = 600 * time.Millisecond
	c := newClient(t, ring, dlock.WithTTL(ttl))
	ctx := ctxFor(t, time.Minute)
	var healthy, stalled *dlock.Lease
	for healthy == nil || stalled == nil {
		name := lockName(t)
		shard, err := ring.GetShardClientForKey(lockKey(name))
		if err != nil {
			t.Fatal(err)
		}
		lease, err := c.Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case shard.Options().Addr == servers[0].Addr() && healthy == nil:
			healthy = lease
		case shard.Options().Addr == servers[1].Addr() && stalled == nil:
			stalled = lease
		default:
			_ = lease.Unlock(ctx)
		}
	}
	servers[1].Pause()
	t.Cleanup(servers[1].Resume)
	waitDone(t, stalled.Done(), lossGuard, "loss of the lease on the stalled shard")
	select {
	case <-healthy.Done():
		t.Fatalf("the lease on a healthy shard was lost while another shard stalled: %v", healthy.Err())
	case <-time.After(15 * ttl): // the property: still held after 15 TTLs
	}
}

// The same after SCRIPT FLUSH (or a shard restarted empty): a renewal that
// meets NOSCRIPT loads the scripts again, and that must not wait on a
// stalled shard that serves none of its locks, as on a cluster
// (TestLease_StalledClusterMasterCostsNoLeaseOnTheOthersAfterAScriptFlush).
func TestRing_StalledShardCostsNoLeaseOnTheOthersAfterAScriptFlush(t *testing.T) {
	servers := redistest.StartMasters(t, 2)
	ring := newRing(t, servers)
	const ttl = 600 * time.Millisecond
	c := newClient(t, ring, dlock.WithTTL(ttl))
	ctx := ctxFor(t, time.Minute)
	var name string
	for {
		name = lockName(t)
		shard, err := ring.GetShardClientForKey(lockKey(name))
		if err != nil {
			t.Fatal(err)
		}
		if shard.Options().Addr == servers[0].Addr() {
			break
		}
	}
	healthy, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		if err := forgetScripts(ctx, s.Client()); err != nil {
			t.Fatal(err)
		}
	}
	servers[1].Pause()
	t.Cleanup(servers[1].Resume)
	select {
	case <-healthy.Done():
		t.Fatalf("the lease on a healthy shard was lost while another shard stalled, after SCRIPT FLUSH: %v", healthy.Err())
	case <-time.After(5 * ttl):
	}
	servers[1].Resume()
	if err := healthy.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the lease on the healthy shard: %v", err)
	}
}
