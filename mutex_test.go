package dlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/check"
)

func TestMutex_ContendedHoldersNeverOverlapAndTokensIncrease(t *testing.T) {
	const clients, goroutinesPerClient, acquisitions = 4, 8, 200 // 32 goroutines
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		var res check.Fenced
		mutexes := make([]*dlock.Mutex, clients)
		for i := range mutexes {
			mutexes[i] = newClient(t, b.newRedis(t)).Mutex(name)
		}
		runWorkers(t, clients*goroutinesPerClient, func(ctx context.Context, holder int) error {
			mu := mutexes[holder/goroutinesPerClient]
			for range acquisitions {
				asked := time.Now()
				lease, err := mu.Lock(ctx)
				if err != nil {
					return err
				}
				res.Enter(holder, lease.Token(), asked)
				res.Exit(holder)
				if err := lease.Unlock(ctx); err != nil {
					return err
				}
			}
			return nil
		})
		want := clients * goroutinesPerClient * acquisitions
		if got := res.Result(); got.Completed != want || got.Overlaps != 0 || got.Stale != 0 {
			t.Fatalf("%+v; want %d completed, 0 overlaps, 0 stale tokens", got, want)
		}
	})
}

func TestMutex_TryLockOfHeldLockIsNotAcquired(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		holder, err := newClient(t, b.newRedis(t)).Mutex(name).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Unlock(ctx)
		_, err = newClient(t, b.newRedis(t)).Mutex(name).TryLock(ctx)
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock of a held lock: %v, want ErrNotAcquired", err)
		}
	})
}

func TestMutex_FencingTokenIsMintedPerAcquisition(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		mu := newClient(t, b.newRedis(t)).Mutex(lockName(t))
		ctx := ctxFor(t, 30*time.Second)
		var last uint64
		for i := range 5 {
			lease, err := mu.TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if lease.Token() <= last {
				t.Fatalf("acquisition %d: token %d not above %d", i, lease.Token(), last)
			}
			last = lease.Token()
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestLease_UnlockAfterAnotherOwnerTookOverIsRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		rdb := b.newRedis(t)
		// Lock, not TryLock: on a loaded machine a first grant of a
		// 100 ms lease (dial, script load) may come back too late to hand
		// over, and is given back; Lock tries again.
		first, err := newClient(t, rdb, dlock.WithLeaseTime(dlock.MinTTL)).Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		waitDone(t, first.Done(), 10*time.Second, "expiry of the first lease")

		second, err := newClient(t, b.newRedis(t)).Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before, err := rdb.Dump(ctx, lockKey(name)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("Unlock of a lease another owner took over: %v, want ErrNotHeld", err)
		}
		after, err := rdb.Dump(ctx, lockKey(name)).Result()
		if err != nil || after != before {
			t.Fatalf("the holder's key changed under a foreign Unlock (err %v)", err)
		}
		if err := second.Err(); err != nil {
			t.Fatalf("holder's lease: %v", err)
		}
		if err := second.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestLease_DoubleUnlockIsRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, 30*time.Second)
		lease, err := newClient(t, b.newRedis(t)).Mutex(lockName(t)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
		}
		if err := lease.Err(); err != nil {
			t.Fatalf("a released lease reports %v, want nil", err)
		}
		select {
		case <-lease.Done():
		default:
			t.Fatal("a released lease is not done")
		}
	})
}

// A waiter must be woken by the release, not by the holder's TTL running out:
// the holder's TTL is a minute, the test allows far less.
func TestMutex_WaiterWakesOnUnlockNotOnTTL(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		holder, err := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute)).Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}

		// The waiter's second refused attempt comes after its subscription
		// is confirmed: from then on it is waiting for a wake-up.
		waiter := newClient(t, b.newRedis(t))
		attempts := countAttempts(waiter)
		acquired := lockInBackground(ctx, waiter.Mutex(name).Lock)
		waitDone(t, attempts.refusedReach(2), 10*time.Second, "the waiter's second attempt")

		start := time.Now()
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		expectAcquired(t, acquired, 15*time.Second, "waiter was not woken by the release")
		t.Logf("handoff after unlock, and the waiter's own unlock: %v", time.Since(start))
	})
}

func TestMutex_CancelledLockLeavesNothingBehind(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		rdb := b.newRedis(t)
		holder, err := newClient(t, rdb).Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before, err := rdb.Dump(ctx, lockKey(name)).Result()
		if err != nil {
			t.Fatal(err)
		}

		waitCtx, cancel := context.WithCancel(ctx)
		waiter := newClient(t, b.newRedis(t))
		attempts := countAttempts(waiter)
		result := make(chan error, 1)
		go func() {
			_, err := waiter.Mutex(name).Lock(waitCtx)
			result <- err
		}()
		waitDone(t, attempts.registeredReach(1), 10*time.Second, "the waiter registering")
		cancel()
		err = <-result
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Lock: %v, want ErrNotAcquired and context.Canceled", err)
		}
		after, err := rdb.Dump(ctx, lockKey(name)).Result()
		if err != nil || after != before {
			t.Fatalf("the holder's key changed under a cancelled waiter (err %v)", err)
		}
		// Nor is anything of the waiter's left but its tombstone, for a
		// copy of its registering attempt that may still be on its way
		// (see TestLateAttempt_OfAWaiterThatGaveUpRegistersAndTakesNothing).
		lock, fence, _ := dlock.KeysOf(dlock.DefaultPrefix, name)
		keys := slices.DeleteFunc(keysOn(t, ctx, rdb, "*{"+name+"}*"), func(k string) bool { return strings.Contains(k, "}:void:") })
		if len(keys) != 2 || !slices.Contains(keys, lock) || !slices.Contains(keys, fence) {
			t.Fatalf("keys after a cancelled waiter: %q; want the holder's lock and the fencing counter", keys)
		}
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A TryLock whose context expires while the server is stalled gives up; the
// attempt still reaches Redis when it resumes, and must not leave a hold.
func TestMutex_TryLockTimedOutOnStalledServerLeavesNoHold(t *testing.T) {
	srv := startServer(t)
	// Without ContextTimeoutEnabled go-redis does not cut a read short at the
	// context's deadline: the call would wait for the server and succeed.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	name := lockName(t)
	ctx := ctxFor(t, 30*time.Second)
	mu := c.Mutex(name)
	if lease, err := mu.TryLock(ctx); err != nil { // load the script while the server answers
		t.Fatal(err)
	} else if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	srv.Pause()
	tryCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	result := make(chan error, 1)
	go func() {
		_, err := mu.TryLock(tryCtx)
		result <- err
	}()
	<-tryCtx.Done() // the attempt is given up; its clean-up now waits for the server
	srv.Resume()
	err := <-result
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock on a stalled server: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if n, err := rdb.Exists(ctx, lockKey(name)).Result(); err != nil || n != 0 {
		t.Fatalf("lock key exists=%d (err %v) after the attempt was given up; want no hold", n, err)
	}
	// The lock is free for the next client at once.
	lease, err := newClient(t, srv.Client()).Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("next TryLock: %v", err)
	}
	_ = lease.Unlock(ctx)
}

func TestLease_UnlockWithCancelledContextReleases(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		rdb := b.newRedis(t)
		lease, err := newClient(t, rdb).Mutex(name).Lock(ctxFor(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		if err := lease.Unlock(cancelled); err != nil {
			t.Fatalf("Unlock with a cancelled context: %v", err)
		}
		if n, err := rdb.Exists(ctxFor(t, 10*time.Second), lockKey(name)).Result(); err != nil || n != 0 {
			t.Fatalf("lock key exists=%d (err %v) after Unlock", n, err)
		}
	})
}

func TestMutex_WaitBoundedByWithWait(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		holder, err := newClient(t, b.newRedis(t)).Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Unlock(ctx)
		c := newClient(t, b.newRedis(t))
		_, err = c.Mutex(name, dlock.WithWait(200*time.Millisecond)).Lock(ctx)
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("bounded wait: %v, want ErrNotAcquired and DeadlineExceeded", err)
		}
		_, err = c.Mutex(name, dlock.WithWait(0)).Lock(ctx)
		if !errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WithWait(0): %v, want a plain ErrNotAcquired", err)
		}
	})
}

// A grant that arrives as the caller's context ends is given back: a
// cancelled call returns the context's error and leaves the lock as it was.
func TestMutex_GrantArrivingAfterCancellationIsGivenBack(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		rdb := b.newRedis(t)
		c := newClient(t, rdb)
		var giveUp atomic.Pointer[context.CancelFunc]
		dlock.OnAttempt(c, func(r dlock.AttemptReport) {
			if cancel := giveUp.Load(); cancel != nil && r.Err == nil && len(r.Reply) > 0 && r.Reply[0] == 1 {
				(*cancel)() // the caller gives up just as Redis says yes
			}
		})
		mu := c.Mutex(name)
		for what, lock := range map[string]func(context.Context) (*dlock.Lease, error){"TryLock": mu.TryLock, "Lock": mu.Lock} {
			ctx, cancel := context.WithCancel(ctxFor(t, 30*time.Second))
			giveUp.Store(&cancel)
			_, err := lock(ctx)
			cancel()
			if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("%s granted after cancellation: %v, want ErrNotAcquired and context.Canceled", what, err)
			}
			if n, err := rdb.Exists(ctxFor(t, 5*time.Second), lockKey(name)).Result(); err != nil || n != 0 {
				t.Fatalf("%s: lock key exists=%d (err %v): the late grant was kept", what, n, err)
			}
		}
	})
}

func TestMutex_CancelledContextSendsNothing(t *testing.T) {
	counter := &commandCounter{}
	rdb := backends[0].newRedis(t)
	rdb.AddHook(counter)
	mu := newClient(t, rdb).Mutex(lockName(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for what, lock := range map[string]func(context.Context) (*dlock.Lease, error){"TryLock": mu.TryLock, "Lock": mu.Lock} {
		if _, err := lock(ctx); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("%s with a cancelled context: %v, want ErrNotAcquired and context.Canceled", what, err)
		}
	}
	if n := counter.commands.Load(); n != 0 {
		t.Fatalf("%d commands sent with a cancelled context, want 0", n)
	}
}
