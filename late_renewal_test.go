package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
)

// renewalTTL is short, so that a renewal comes soon (a third of it in).
const renewalTTL = 900 * time.Millisecond

// A renewal held up on the network (a stalled path, go-redis's resend after
// a read timeout) can reach the server after a longer Extend was confirmed.
// It must not cut the hold back to the renewal's shorter TTL: the lease
// counts on the Extend's. An explicit Extend to a shorter TTL still shortens.
func TestLateRenewal_NeverShortensALongerExtend(t *testing.T) {
	forEachLockType(t, func(t *testing.T, b backend, lt lockType) {
		ctx := ctxFor(t, 30*time.Second)
		other := b.newRedis(t)
		rdb := b.newRedis(t)
		copies := &copier{script: lt.extend}
		rdb.AddHook(copies)

		lease, err := lt.take(newClient(t, rdb, dlock.WithTTL(renewalTTL)), lt.name+lockName(t))(ctx)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, ctx, "a renewal", func() bool { return len(copies.sent()) > 0 })
		late := len(copies.sent()) // renewals only: Extend has not run yet

		if err := lease.Extend(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		for _, args := range copies.sent()[:late] {
			if err := other.Do(ctx, args...).Err(); err != nil {
				t.Fatalf("late renewal: %v", err)
			}
		}
		expectHoldOutlivesLease(t, ctx, lease, "after a late renewal")

		// An explicit Extend may shorten: the caller asked for it.
		if err := lease.Extend(ctx, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		if left, err := lease.TTL(ctx); err != nil || left > 2*time.Second {
			t.Fatalf("after Extend(2s) the hold has %v left (%v); want at most 2s", left, err)
		}
		expectHoldOutlivesLease(t, ctx, lease, "after a shorter Extend")
	})
}

// A copy of the attempt that granted a lease (its first copy held up on
// the network while go-redis's resend was answered) can reach the server
// after a longer Extend was confirmed. It finds the hold its own, and must
// not cut it back to the acquire's TTL either: the lease counts on the
// Extend's.
func TestLateAttempt_NeverShortensALongerExtend(t *testing.T) {
	forEachLockType(t, func(t *testing.T, b backend, lt lockType) {
		ctx := ctxFor(t, 30*time.Second)
		other := b.newRedis(t)
		rdb := b.newRedis(t)
		copies := &copier{script: lt.acquire}
		rdb.AddHook(copies)

		lease, err := lt.take(newClient(t, rdb, dlock.WithTTL(renewalTTL)), lt.name+lockName(t))(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Extend(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		for _, args := range copies.sent() {
			if err := other.Do(ctx, args...).Err(); err != nil {
				t.Fatalf("late attempt: %v", err)
			}
		}
		expectHoldOutlivesLease(t, ctx, lease, "after a late copy of the granting attempt")
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// The same for a Redlock: a late renewal on a node must not cut that node's
// hold below the validity the lease counts on.
func TestRedlock_LateRenewalNeverShortensALongerExtend(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	servers := redistest.StartMasters(t, 3)
	clients := make([]redis.UniversalClient, len(servers))
	copies := make([]*copier, len(servers))
	for i, srv := range servers {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		copies[i] = &copier{script: scripts.MutexExtend}
		rdb.AddHook(copies[i])
		clients[i] = rdb
	}
	// Fresh servers load the Mutex scripts on a first attempt, which can
	// take longer than the node timeout (18 ms at this TTL): load them
	// first, on other connections, so that every node holds the lock.
	plain := make([]redis.UniversalClient, len(servers))
	for i, srv := range servers {
		plain[i] = srv.Client()
	}
	warm, err := mustRedlock(t, plain, dlock.WithRestartGuard(0), dlock.WithTTL(renewalTTL)).Mutex(lockName(t) + ":warm").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Unlock(ctx)
	r := mustRedlock(t, clients, dlock.WithRestartGuard(0), dlock.WithTTL(renewalTTL))
	name := lockName(t)
	lease, err := r.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lease.Unlock(context.Background()) })
	eventually(t, ctx, "a renewal", func() bool { return len(copies[0].sent()) > 0 })
	late := make([]int, len(copies))
	for i, c := range copies {
		late[i] = len(c.sent())
	}

	if err := lease.Extend(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for i, c := range copies {
		for _, args := range c.sent()[:late[i]] {
			if err := servers[i].Client().Do(ctx, args...).Err(); err != nil {
				t.Fatalf("late renewal on node %d: %v", i, err)
			}
		}
	}
	for i, srv := range servers {
		left := srv.Client().PTTL(ctx, lockKey(name)).Val()
		if want := time.Until(lease.Deadline()); left < want {
			t.Fatalf("node %d: the hold has %v left after a late renewal; the lease counts on %v", i, left, want)
		}
	}
}

// expectHoldOutlivesLease fails the test if Redis would let the hold go
// before the lease's deadline.
func expectHoldOutlivesLease(t *testing.T, ctx context.Context, lease *dlock.Lease, when string) {
	t.Helper()
	left, err := lease.TTL(ctx)
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	if counted := time.Until(lease.Deadline()); left < counted {
		t.Fatalf("%s: the hold has %v left; the lease counts on %v", when, left, counted)
	}
}
