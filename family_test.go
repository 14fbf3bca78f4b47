package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// What every lease gives, on the types that share the Mutex's lease: a
// watchdog that keeps the hold past its TTL, Extend, TTL and Context.
func TestFamily_LeasesRenewPastTheirTTL(t *testing.T) {
	const ttl = 300 * time.Millisecond
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		c := newClient(t, b.newRedis(t), dlock.WithTTL(ttl))
		other := newClient(t, b.newRedis(t))
		fair, sem, multi := lockName(t), lockName(t), lockNames(t, 3)
		types := []struct {
			name      string
			lock, try func(context.Context) (*dlock.Lease, error)
		}{
			{"FairMutex", c.FairMutex(fair).Lock, other.FairMutex(fair).TryLock},
			{"Semaphore", c.Semaphore(sem, 1).Acquire, other.Semaphore(sem, 1).TryAcquire},
			{"MultiLock", c.MultiLock(multi).Lock, other.MultiLock(multi[1:]).TryLock},
		}
		for _, typ := range types {
			lease, err := typ.lock(ctx)
			if err != nil {
				t.Fatalf("%s: %v", typ.name, err)
			}
			work := lease.Context(ctx)
			// Several TTLs pass: only renewals keep the hold.
			for deadline := lease.Deadline(); time.Now().Before(deadline.Add(2 * ttl)); {
				select {
				case <-lease.Done():
					t.Fatalf("%s: lease ended while renewed: %v", typ.name, lease.Err())
				case <-time.After(ttl / 2):
				}
			}
			if _, err := typ.try(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("%s: another client got in after %v of a %v TTL: %v", typ.name, 3*ttl, ttl, err)
			}
			if err := lease.Extend(ctx, time.Minute); err != nil {
				t.Fatalf("%s: Extend: %v", typ.name, err)
			}
			if left, err := lease.TTL(ctx); err != nil || left <= ttl {
				t.Fatalf("%s: TTL after Extend to a minute: %v, %v", typ.name, left, err)
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Fatalf("%s: Unlock: %v", typ.name, err)
			}
			waitDone(t, work.Done(), lossGuard, typ.name+": the lease's context ending with the release")
			if l, err := typ.try(ctx); err != nil {
				t.Fatalf("%s: free after Unlock: %v", typ.name, err)
			} else {
				_ = l.Unlock(ctx)
			}
		}
	})
}

// The longest TTL accepted works on every type: no script's arithmetic on
// expiries loses precision or overflows, and Redis takes the PX.
func TestFamily_MaxTTLIsAccepted(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	c := newClient(t, backends[0].newRedis(t), dlock.WithLeaseTime(dlock.MaxTTL))
	acquires := map[string]func(context.Context) (*dlock.Lease, error){
		"Mutex":          c.Mutex(lockName(t)).TryLock,
		"ReentrantMutex": c.ReentrantMutex(lockName(t)).TryLock,
		"RWMutex read":   c.RWMutex(lockName(t)).TryRLock,
		"RWMutex write":  c.RWMutex(lockName(t)).TryLock,
		"FairMutex":      c.FairMutex(lockName(t)).TryLock,
		"Semaphore":      c.Semaphore(lockName(t), 2).TryAcquire,
		"MultiLock":      c.MultiLock(lockNames(t, 2)).TryLock,
	}
	for typ, acquire := range acquires {
		lease, err := acquire(ctx)
		if err != nil {
			t.Fatalf("%s with a lease time of MaxTTL: %v", typ, err)
		}
		if left, err := lease.TTL(ctx); err != nil || left < dlock.MaxTTL-time.Minute {
			t.Errorf("%s: TTL %v (err %v); want about %v", typ, left, err, dlock.MaxTTL)
		}
		if err := lease.Extend(ctx, dlock.MaxTTL); err != nil {
			t.Errorf("%s: Extend(MaxTTL): %v", typ, err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Errorf("%s: Unlock: %v", typ, err)
		}
	}
}
