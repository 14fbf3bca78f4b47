package dlock_test

import (
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/scripts"
)

// A refusal tells the waiter how long the hold in its way has left, as
// Redis counted when it ran the attempt. A reply read late (a slow link, a
// starved process) has used part of that time already: the waiter tries
// again when the hold runs out, not that long after reading the reply.
// The explorer's soak, seed 1795742894877402283: a MultiLock waiter behind
// a dead child's claim, given its locks 269 ms past the crash bound.
func TestWait_RetryAfterASlowRefusalCountsTheHoldsTimeFromTheAttempt(t *testing.T) {
	t.Parallel() // waits on timers of its own, not on the CPU
	const (
		ttl  = 3 * time.Second // the hold's, never renewed
		slow = ttl + 300*time.Millisecond
		// Retrying a hold's TTL after the late reply takes ttl more: half
		// of it tells the two apart on a loaded machine.
		bound = slow + ttl/2
	)
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, 30*time.Second)
		name := lockName(t)
		holders := newClient(t, b.newRedis(t), dlock.WithTTL(ttl))
		if _, err := holders.Mutex(name).Lock(ctx); err != nil {
			t.Fatal(err)
		}
		_ = holders.Close() // no renewals: the hold runs out within its TTL

		rdb := b.newRedis(t)
		// The first refusal comes before the waiter subscribes, and it
		// tries again at once; the second, registered, is the one it
		// waits after.
		rdb.AddHook(&copier{script: scripts.MutexAcquire, slowReply: slow, slowStatus: 0, slowAfter: 1})
		start := time.Now()
		lease, err := newClient(t, rdb, dlock.WithWaiterRefresh(10*time.Second)).Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if took > bound {
			t.Fatalf("granted %v after asking, behind a hold of %v whose refusal was read after %v: want at most %v", took, ttl, slow, bound)
		}
	})
}
