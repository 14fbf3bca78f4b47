package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/check"
	"github.com/dlockio/dlock/internal/scripts"
)

func TestSemaphore_NeverMorePermitsHeldThanItHas(t *testing.T) {
	const permits, rounds = 3, 60
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		res := check.Bounded{Limit: permits}
		sems := make([]*dlock.Semaphore, 4*permits)
		for i := range sems {
			sems[i] = newClient(t, b.newRedis(t)).Semaphore(name, permits)
		}
		runWorkers(t, len(sems), func(ctx context.Context, worker int) error {
			for range rounds {
				lease, err := sems[worker].Acquire(ctx)
				if err != nil {
					return err
				}
				res.Enter(lease.Token())
				time.Sleep(time.Millisecond) // the work: lets holders overlap
				res.Exit()
				if err := lease.Unlock(ctx); err != nil {
					return err
				}
			}
			return nil
		})
		got := res.Result()
		t.Logf("%+v", got)
		if got.Completed != 4*permits*rounds || got.Over != 0 || got.Repeated != 0 {
			t.Fatalf("%+v; want %d completed, never over %d holders, no token twice", got, 4*permits*rounds, permits)
		}
	})
}

func TestSemaphore_CrashedHoldersLosePermitsToNobody(t *testing.T) {
	const permits, holders = 3, 12
	const ttl = 300 * time.Millisecond
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		name := lockName(t)
		res := check.Bounded{Limit: permits}
		clients := make([]*dlock.Client, holders)
		for i := range clients {
			c, err := dlock.New(b.newRedis(t), dlock.WithTTL(ttl), dlock.WithWaiterRefresh(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			clients[i] = c
		}
		// Each holder takes a permit, then either gives it back or crashes
		// (its client stops, so nothing renews the permit).
		runWorkers(t, holders, func(ctx context.Context, worker int) error {
			c := clients[worker]
			defer c.Close()
			lease, err := c.Semaphore(name, permits).Acquire(ctx)
			if err != nil {
				return err
			}
			res.Enter(lease.Token())
			res.Exit()
			if worker%2 == 0 { // every other holder crashes
				return nil
			}
			return lease.Unlock(ctx)
		})
		if got := res.Result(); got.Over != 0 || got.Repeated != 0 {
			t.Fatalf("%+v; want never over %d holders, no token twice", got, permits)
		}
		// Every permit comes back, and no more than there are.
		sem := newClient(t, b.newRedis(t)).Semaphore(name, permits)
		for range permits {
			if _, err := sem.Acquire(ctx); err != nil {
				t.Fatalf("a permit did not come back: %v", err)
			}
		}
		if l, err := sem.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("a permit beyond %d: %v, %v; want ErrNotAcquired", permits, l, err)
		}
	})
}

func TestSemaphore_ReleaseWakesAWaiter(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		name := lockName(t)
		holder, err := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute)).Semaphore(name, 1).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		waiter := newClient(t, b.newRedis(t), dlock.WithWaiterRefresh(time.Hour))
		registered := countAttemptsOf(waiter, scripts.SemAcquire).registeredReach(1)
		waiting := lockInBackground(ctx, waiter.Semaphore(name, 1).Acquire)
		waitDone(t, registered, time.Minute, "the waiter registering")
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// Neither the holder's TTL nor the waiter's refresh ends within the
		// guard: only the release's wake-up can let the waiter in.
		expectAcquired(t, waiting, 20*time.Second, "the waiter was not woken by the release")
	})
}

// SetPermits wakes every waiter, each on its client's own channel: a waiter
// whose handle has the old number learns of the change at once (ErrPermits)
// rather than at its next refresh.
func TestSemaphore_SetPermitsWakesTheWaiters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		name := lockName(t)
		c := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute))
		if _, err := c.Semaphore(name, 1).Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		waiter := newClient(t, b.newRedis(t), dlock.WithWaiterRefresh(time.Hour))
		registered := countAttemptsOf(waiter, scripts.SemAcquire).registeredReach(1)
		waiting := lockInBackground(ctx, waiter.Semaphore(name, 1).Acquire)
		waitDone(t, registered, time.Minute, "the waiter registering")
		if err := c.Semaphore(name, 1).SetPermits(ctx, 2); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-waiting:
			if !errors.Is(err, dlock.ErrPermits) {
				t.Fatalf("the waiter woken by SetPermits: %v; want ErrPermits", err)
			}
		case <-time.After(20 * time.Second): // neither the TTL nor a refresh comes sooner
			t.Fatal("the waiter was not woken by SetPermits")
		}
	})
}

func TestSemaphore_PermitsAreAgreedAndChangedDeliberately(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	name := lockName(t)
	c := newClient(t, backends[0].newRedis(t))
	two := c.Semaphore(name, 2)
	first, err := two.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	three := c.Semaphore(name, 3)
	if _, err := three.TryAcquire(ctx); !errors.Is(err, dlock.ErrPermits) {
		t.Fatalf("opened with 3 permits where Redis has 2: %v; want ErrPermits", err)
	}
	if err := three.SetPermits(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := two.TryAcquire(ctx); !errors.Is(err, dlock.ErrPermits) {
		t.Fatalf("opened with 2 permits after the change to 3: %v; want ErrPermits", err)
	}
	for range 2 {
		if _, err := three.TryAcquire(ctx); err != nil {
			t.Fatalf("a permit of the 3: %v", err)
		}
	}
	if _, err := three.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a fourth permit of 3: %v; want ErrNotAcquired", err)
	}
	// Down to one: the three held stay held, none is granted until below it.
	if err := three.SetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Semaphore(name, 1).TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a permit while 2 are held of 1: %v; want ErrNotAcquired", err)
	}
	if err := three.SetPermits(ctx, 0); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("SetPermits(0): %v; want ErrInvalid", err)
	}
}

func TestSemaphore_BadInputWrongTypeAndDoubleUnlock(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb)
	for _, sem := range []*dlock.Semaphore{
		c.Semaphore("x", 0),
		c.Semaphore("x", -1),
		c.Semaphore("x", 1<<53), // Lua's numbers are doubles: it would be stored rounded
		c.Semaphore("", 1),
		c.Semaphore("x", 1, dlock.WithTTL(time.Millisecond)),
		(*dlock.Client)(nil).Semaphore("x", 1),
	} {
		if _, err := sem.Acquire(ctx); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Acquire of %q with %d permits: %v; want ErrInvalid", sem.Name(), sem.Permits(), err)
		}
	}

	// A Mutex of the same name, and a foreign string.
	held := lockName(t)
	if _, err := c.Mutex(held).TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Semaphore(held, 2).TryAcquire(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Semaphore on a held Mutex's name: %v; want ErrWrongType", err)
	}
	foreign := lockName(t)
	if err := rdb.Set(ctx, lockKey(foreign)+":permits", "many", 0).Err(); err != nil {
		t.Fatal(err)
	}
	dump := rdb.Dump(ctx, lockKey(foreign)+":permits").Val()
	if _, err := c.Semaphore(foreign, 2).TryAcquire(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("acquire with a foreign value where the permits are kept: %v; want ErrWrongType", err)
	}
	if rdb.Dump(ctx, lockKey(foreign)+":permits").Val() != dump {
		t.Fatal("a failed acquire changed the foreign key")
	}

	expectSecondUnlockRefused(t, ctx, c.Semaphore(lockName(t), 1).Acquire)
}

func TestSemaphore_CancelledAcquireLeavesNothingBehind(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	rdb := backends[0].newRedis(t)
	name := lockName(t)
	c := newClient(t, rdb)
	holder, err := c.Semaphore(name, 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Semaphore(name, 1).Acquire(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a cancelled context: %v", err)
	}
	waitCtx, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	if _, err := c.Semaphore(name, 1).Acquire(waitCtx); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire that timed out: %v", err)
	}
	if n := rdb.ZCard(ctx, lockKey(name)+":waiters").Val(); n != 0 {
		t.Fatalf("%d waiters left registered", n)
	}
	if n := rdb.ZCard(ctx, lockKey(name)).Val(); n != 1 {
		t.Fatalf("%d permits held; want the holder's alone", n)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A Semaphore whose tokens hash is lost while its holders' set lives
// (eviction, a DEL: outside what dlock promises) is refused by every
// acquire and Describe of the name as another program's value, since dlock
// cannot tell the set from one. Its renewals refuse it too, so each lease reports the loss at
// its next renewal and the set expires with its last permit: the name is
// free again within a TTL, not shut for as long as a holder renews.
func TestSemaphore_TokensLostFreeTheNameWithinATTL(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		rdb := b.newRedis(t)
		c := newClient(t, rdb, dlock.WithTTL(ttl))
		name := lockName(t)
		lease, err := c.Semaphore(name, 2).TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.Del(ctx, lockKey(name)+scripts.TokensSuffix).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Semaphore(name, 2).TryAcquire(ctx); !errors.Is(err, dlock.ErrWrongType) {
			t.Fatalf("acquire with the tokens lost: %v; want ErrWrongType (the premise)", err)
		}
		if _, err := c.Describe(ctx, name); !errors.Is(err, dlock.ErrWrongType) {
			t.Fatalf("Describe with the tokens lost: %v; want ErrWrongType", err)
		}
		select {
		case <-lease.Done():
			if !errors.Is(lease.Err(), dlock.ErrLeaseLost) {
				t.Errorf("lease ended with %v; want ErrLeaseLost", lease.Err())
			}
		case <-time.After(10 * ttl):
			t.Fatalf("the lease still renews %v after its tokens were lost, keeping the name shut", 10*ttl)
		}
		within, cancel := context.WithTimeout(ctx, 5*ttl)
		defer cancel()
		eventually(t, within, "the name free again, within a TTL of the lease's loss", func() bool {
			l, err := c.Semaphore(name, 2).TryAcquire(ctx)
			if err == nil {
				_ = l.Unlock(ctx)
			}
			return err == nil
		})
	})
}

// A Semaphore's number of permits goes with its last permit, released or
// run out, as its holders' keys do: a name used once leaves nothing
// behind. While a permit is held, renewed past its TTL, the number stays,
// and a handle opened with another fails with ErrPermits. One set while no
// permit is held lasts FenceRetentionTTLs of the handle's TTL.
func TestSemaphore_PermitsGoWithTheLastPermit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		rdb := b.newRedis(t)
		name := lockName(t)
		permits := lockKey(name) + scripts.PermitsSuffix
		expectGone := func(what string) {
			t.Helper()
			within, cancel := context.WithTimeout(ctx, 10*time.Second) // the TTL is 1 s
			defer cancel()
			eventually(t, within, "the number of permits gone "+what, func() bool {
				return rdb.Exists(ctx, permits).Val() == 0
			})
		}

		renewals, observed := renewalsSeen()
		held, err := newClient(t, rdb, dlock.WithTTL(time.Second), observed).Semaphore(name, 2).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for confirmed := 0; confirmed < 4; { // more than a TTL's worth of renewals
			select {
			case ev := <-renewals:
				if ev.Result == dlock.RenewalOK {
					confirmed++
				}
			case <-ctx.Done():
				t.Fatal("no renewal answered")
			}
		}
		if _, err := newClient(t, rdb).Semaphore(name, 3).TryAcquire(ctx); !errors.Is(err, dlock.ErrPermits) {
			t.Fatalf("opened with 3 permits while 2 are agreed and one held: %v; want ErrPermits", err)
		}
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		expectGone("after the last permit's release")

		crashed := newClient(t, rdb, dlock.WithTTL(time.Second))
		if _, err := crashed.Semaphore(name, 2).Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		_ = crashed.Close() // no renewals: the permit runs out within its TTL
		expectGone("after the last permit ran out")

		if err := newClient(t, rdb, dlock.WithTTL(time.Second)).Semaphore(name, 2).SetPermits(ctx, 5); err != nil {
			t.Fatal(err)
		}
		if left := rdb.PTTL(ctx, permits).Val(); left <= 0 || left > scripts.FenceRetentionTTLs*time.Second {
			t.Fatalf("a number set while no permit is held expires in %v; want within %d TTLs", left, scripts.FenceRetentionTTLs)
		}
	})
}

// The number of permits goes with the last permit's release, not a TTL
// later: a handle opened with another number right after it is refused
// nothing (dlock run --permits 2, then --permits 3).
func TestSemaphore_TheLastReleaseFreesTheNumberOfPermits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, 30*time.Second)
		c := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute))
		name := lockName(t)
		first, err := c.Semaphore(name, 2).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		second, err := c.Semaphore(name, 2).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Semaphore(name, 3).TryAcquire(ctx); !errors.Is(err, dlock.ErrPermits) {
			t.Fatalf("opened with 3 permits while a permit of 2 is held: %v; want ErrPermits", err)
		}
		if err := second.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		lease, err := c.Semaphore(name, 3).TryAcquire(ctx)
		if err != nil {
			t.Fatalf("opened with 3 permits after the last permit of 2 was released: %v", err)
		}
		_ = lease.Unlock(ctx)
	})
}
