package dlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/check"
)

func inspectRW(t testing.TB, ctx context.Context, rw *dlock.RWMutex) dlock.RWState {
	t.Helper()
	s, err := rw.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// 16 readers and 4 writers, each a client of its own, on one lock.
func TestRWMutex_ReadersAndWritersNeverConflict(t *testing.T) {
	const readers, writers, reads, writes = 16, 4, 120, 60
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		var res check.Shared
		var wg sync.WaitGroup
		errs := make(chan error, readers+writers)
		work := func(write bool, i int) {
			defer wg.Done()
			ctx := ctxFor(t, 2*time.Minute)
			rw := newClient(t, b.newRedis(t)).RWMutex(name)
			n := reads
			if write {
				n = writes
			}
			for j := range n {
				asked := time.Now()
				var lease, nested *dlock.Lease
				var err error
				if write {
					lease, err = rw.Lock(ctx)
				} else {
					lease, err = rw.RLock(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
				if write {
					res.EnterWrite(lease.Token(), asked)
				} else {
					res.EnterRead(asked)
				}
				if j%4 == i%4 { // now and then, re-enter while holding
					if write {
						nested, err = rw.Lock(lease.Context(ctx))
					} else {
						nested, err = rw.RLock(lease.Context(ctx))
					}
					if err == nil && nested.Token() != lease.Token() {
						err = errors.New("a re-entry got a token of its own")
					}
					if err == nil {
						err = nested.Unlock(ctx)
					}
				}
				if write {
					res.ExitWrite()
				} else {
					res.ExitRead()
				}
				if err == nil {
					err = lease.Unlock(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}
		for i := range readers {
			wg.Add(1)
			go work(false, i)
		}
		for i := range writers {
			wg.Add(1)
			go work(true, i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got := res.Result()
		if got.Reads != readers*reads || got.Writes != writers*writes || got.Conflicts != 0 || got.Stale != 0 {
			t.Fatalf("%+v; want %d reads, %d writes, no conflicts, writers' tokens increasing",
				got, readers*reads, writers*writes)
		}
		t.Logf("handoff to a waiting writer: p50 %v p99 %v (%d); to a waiting reader: p50 %v p99 %v (%d)",
			res.WriteHandoffs.Percentile(50), res.WriteHandoffs.Percentile(99), res.WriteHandoffs.Count(),
			res.ReadHandoffs.Percentile(50), res.ReadHandoffs.Percentile(99), res.ReadHandoffs.Count())
	})
}

// A reader that stops renewing (its process died) frees its share of the
// lock within its TTL, while another reader keeps renewing; a writer then
// waits only for the live reader.
func TestRWMutex_CrashedReaderFreesWithinItsTTLWhileOthersRenew(t *testing.T) {
	const ttl = 400 * time.Millisecond
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		observer := newClient(t, b.newRedis(t)).RWMutex(name)
		crashed, err := newClient(t, b.newRedis(t), dlock.WithLeaseTime(ttl)).RWMutex(name).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		crashedAt := time.Now()
		live, err := newClient(t, b.newRedis(t), dlock.WithTTL(ttl)).RWMutex(name).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		writer := lockInBackground(ctx, newClient(t, b.newRedis(t), dlock.WithWaiterRefresh(50*time.Millisecond)).RWMutex(name).Lock)

		eventually(t, ctx, "the crashed reader's hold expiring", func() bool { return inspectRW(t, ctx, observer).Readers == 1 })
		if gone := time.Since(crashedAt); gone > ttl+5*time.Second {
			t.Fatalf("the crashed reader blocked for %v, TTL %v", gone, ttl)
		}
		waitDone(t, crashed.Done(), lossGuard, "the crashed reader's own deadline")
		select {
		case err := <-writer:
			t.Fatalf("the writer got in while a reader renews its hold: %v", err)
		default:
		}
		if err := live.Err(); err != nil {
			t.Fatalf("the renewing reader lost its hold: %v", err)
		}
		if left, err := live.TTL(ctx); err != nil || left <= 0 {
			t.Fatalf("the renewing reader's TTL: %v, %v", left, err)
		}
		if err := live.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		expectAcquired(t, writer, 10*time.Second, "the writer did not get the lock after the live reader left")
	})
}

func TestRWMutex_CrashedWriterFreesWithinItsTTL(t *testing.T) {
	const ttl = 300 * time.Millisecond
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		if _, err := newClient(t, b.newRedis(t), dlock.WithLeaseTime(ttl)).RWMutex(name).Lock(ctx); err != nil {
			t.Fatal(err)
		}
		held := time.Now()
		reader := newClient(t, b.newRedis(t), dlock.WithWaiterRefresh(50*time.Millisecond)).RWMutex(name)
		if _, err := reader.RLock(ctx); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(held); waited < ttl*3/4 || waited > ttl+5*time.Second {
			t.Fatalf("the reader got in %v after the crashed writer's hold, want about %v", waited, ttl)
		}
	})
}

// The bound: a writer that waits gets the lock once the reads held when it
// registered have ended (here 20 ms each) plus a wake-up, and it registers
// on its second attempt, right after subscribing. Tested at 5 s.
func TestRWMutex_WriterIsNotStarvedByOverlappingReaders(t *testing.T) {
	const readers, hold, bound = 6, 20 * time.Millisecond, 5 * time.Second
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		ctx := ctxFor(t, time.Minute)
		stop := make(chan struct{})
		var reads atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, readers)
		for i := range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rw := newClient(t, b.newRedis(t)).RWMutex(name)
				// Staggered starts, so that the reads overlap and the lock is
				// never free of readers while they run unhindered.
				time.Sleep(time.Duration(i) * hold / readers)
				for {
					select {
					case <-stop:
						return
					default:
					}
					lease, err := rw.RLock(ctx)
					if err != nil {
						errs <- err
						return
					}
					reads.Add(1)
					time.Sleep(hold) // the reader's work
					if err := lease.Unlock(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		eventually(t, ctx, "the readers getting going", func() bool { return reads.Load() >= 3*readers })

		writer := newClient(t, b.newRedis(t)).RWMutex(name)
		asked := time.Now()
		wctx, cancel := context.WithTimeout(ctx, bound)
		lease, err := writer.Lock(wctx)
		cancel()
		if err != nil {
			t.Fatalf("the writer starved: %v after %v", err, time.Since(asked))
		}
		t.Logf("the writer got the lock after %v", time.Since(asked))
		before := reads.Load()
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		eventually(t, ctx, "the readers going on after the writer", func() bool { return reads.Load() > before+readers })
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	})
}

func TestRWMutex_WritersReleaseWakesEveryWaitingReader(t *testing.T) {
	const waiting = 3
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		writer := newClient(t, b.newRedis(t)).RWMutex(name)
		lease, err := writer.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Waiters that try again only after an hour: nothing but a wake-up
		// lets them in within the test.
		var results []<-chan error
		for range waiting {
			rw := newClient(t, b.newRedis(t), dlock.WithWaiterRefresh(time.Hour)).RWMutex(name)
			results = append(results, lockInBackground(ctx, rw.RLock))
		}
		eventually(t, ctx, "the readers registering", func() bool { return inspectRW(t, ctx, writer).ReadersWaiting == waiting })
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		for _, r := range results {
			expectAcquired(t, r, 10*time.Second, "a waiting reader was not woken by the writer's release")
		}
	})
}

func TestRWMutex_LastReadersReleaseWakesAWriter(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		c := newClient(t, b.newRedis(t))
		first, err := c.RWMutex(name).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		second, err := c.RWMutex(name).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		writer := newClient(t, b.newRedis(t), dlock.WithWaiterRefresh(time.Hour)).RWMutex(name)
		result := lockInBackground(ctx, writer.Lock)
		eventually(t, ctx, "the writer registering", func() bool { return inspectRW(t, ctx, writer).WritersWaiting == 1 })
		if err := first.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := second.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		expectAcquired(t, result, 10*time.Second, "the waiting writer was not woken by the last reader's release")
	})
}

func TestRWMutex_WaitingWriterHoldsNewReadersBackButNotReentry(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	rdb := backends[0].newRedis(t)
	name := lockName(t)
	reader := newClient(t, rdb).RWMutex(name)
	held, err := reader.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writer := newClient(t, backends[0].newRedis(t)).RWMutex(name)
	result := lockInBackground(ctx, writer.Lock)
	eventually(t, ctx, "the writer registering", func() bool { return inspectRW(t, ctx, writer).WritersWaiting == 1 })

	if _, err := newClient(t, rdb).RWMutex(name).TryRLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a new reader while a writer waits: %v, want ErrNotAcquired", err)
	}
	if _, err := reader.TryRLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a new reader through the reader's handle, without its hold: %v, want ErrNotAcquired", err)
	}
	again, err := reader.TryRLock(held.Context(ctx))
	if err != nil {
		t.Fatalf("a reader re-entering while a writer waits: %v", err)
	}
	for _, l := range []*dlock.Lease{again, held} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	expectAcquired(t, result, 10*time.Second, "the writer did not get the lock")
}

// A writer that dies while waiting (here: its connection gone, so it can
// neither refresh its registration nor withdraw it) holds new readers back
// for its registration's lifetime, three waiter refreshes, and no longer.
func TestRWMutex_DeadWaitingWriterHoldsReadersBackOnlyForItsWaitLease(t *testing.T) {
	const refresh = 100 * time.Millisecond // registration lives 300 ms
	ctx := ctxFor(t, 30*time.Second)
	name := lockName(t)
	reader := newClient(t, backends[0].newRedis(t)).RWMutex(name)
	held, err := reader.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	doomed := redis.NewClient(&redis.Options{Addr: sharedStandalone().Addr()})
	writer, err := dlock.New(doomed, dlock.WithWaiterRefresh(refresh))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = writer.Close() })
	result := lockInBackground(ctx, writer.RWMutex(name).Lock)
	eventually(t, ctx, "the writer registering", func() bool { return inspectRW(t, ctx, reader).WritersWaiting == 1 })
	_ = doomed.Close()
	died := time.Now()
	if err := <-result; err == nil {
		t.Fatal("the writer without a connection got the lock")
	}

	newcomer := newClient(t, backends[0].newRedis(t), dlock.WithWaiterRefresh(refresh)).RWMutex(name)
	// The registration was last refreshed at most a refresh before the
	// writer died, so it holds readers back for at least one more refresh.
	sent := time.Since(died)
	if _, err := newcomer.TryRLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) && sent < refresh {
		t.Fatalf("a new reader %v after the writer died: %v, want ErrNotAcquired", sent, err)
	}
	if _, err := newcomer.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(died); waited > 3*refresh+5*time.Second {
		t.Fatalf("the dead writer held readers back for %v", waited)
	}
	if err := held.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestRWMutex_DowngradeWorksUpgradeIsRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		rw := newClient(t, b.newRedis(t)).RWMutex(name)
		other := newClient(t, b.newRedis(t)).RWMutex(name)

		write, err := rw.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		writing := write.Context(ctx)
		again, err := rw.Lock(writing)
		if err != nil || again.Token() != write.Token() {
			t.Fatalf("the writer writing again: %v, want a re-entry with the write token", err)
		}
		read, err := rw.RLock(writing)
		if err != nil {
			t.Fatalf("the writer taking a read lock: %v", err)
		}
		if read.Token() <= write.Token() {
			t.Fatalf("read token %d not above the write token %d it followed", read.Token(), write.Token())
		}
		for what, try := range map[string]func(context.Context) (*dlock.Lease, error){
			"another handle": other.TryRLock, "the writer's handle, without its hold": rw.TryRLock,
		} {
			if _, err := try(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("another owner (%s) reading during the write: %v, want ErrNotAcquired", what, err)
			}
		}
		for _, l := range []*dlock.Lease{again, write} {
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := read.Err(); err != nil {
			t.Fatalf("the read lock went with the write lock: %v", err)
		}
		// The write lease's context ended with it: the reader goes on
		// under its own.
		reading := read.Context(ctx)
		otherRead, err := other.TryRLock(ctx)
		if err != nil {
			t.Fatalf("another owner reading after the downgrade: %v", err)
		}
		if s := inspectRW(t, reading, rw); s.WriteHolds != 0 || s.Readers != 2 || s.OwnerReadHolds != 1 {
			t.Fatalf("after the downgrade: %+v", s)
		}

		for what, try := range map[string]func(context.Context) (*dlock.Lease, error){"Lock": rw.Lock, "TryLock": rw.TryLock} {
			if _, err := try(reading); !errors.Is(err, dlock.ErrUpgrade) || errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("%s by a reader: %v, want ErrUpgrade", what, err)
			}
		}
		if err := otherRead.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := rw.Lock(reading); !errors.Is(err, dlock.ErrUpgrade) {
			t.Fatalf("Lock by the only reader: %v, want ErrUpgrade", err)
		}
		if s := inspectRW(t, ctx, rw); s.WritersWaiting != 0 || s.ReadHolds != 1 {
			t.Fatalf("a refused upgrade left %+v", s)
		}
	})
}

func TestRWMutex_ReadLeaseIsALease(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	rw := newClient(t, backends[0].newRedis(t)).RWMutex(lockName(t))
	lease, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if left, err := lease.TTL(ctx); err != nil || left <= 30*time.Second || left > time.Minute {
		t.Fatalf("TTL after Extend(1m): %v, %v", left, err)
	}
	leaseCtx := lease.Context(ctx)
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	waitDone(t, leaseCtx.Done(), lossGuard, "the lease's context ending with the Unlock")
	if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
	if err := lease.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend after Unlock: %v, want ErrNotHeld", err)
	}
}

func TestRWMutex_WrongTypeAndBadInputFail(t *testing.T) {
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb)
	ctx := ctxFor(t, 30*time.Second)
	name := lockName(t)
	rdb.Set(ctx, lockKey(name), "a string", 0)
	rw := c.RWMutex(name)
	for what, try := range map[string]func(context.Context) (*dlock.Lease, error){
		"Lock": rw.Lock, "TryLock": rw.TryLock, "RLock": rw.RLock, "TryRLock": rw.TryRLock,
	} {
		if _, err := try(ctx); !errors.Is(err, dlock.ErrWrongType) {
			t.Errorf("%s on a string key: %v, want ErrWrongType", what, err)
		}
	}
	if _, err := rw.Inspect(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("Inspect on a string key: %v, want ErrWrongType", err)
	}
	if v, _ := rdb.Get(ctx, lockKey(name)).Result(); v != "a string" {
		t.Fatal("the foreign value was changed")
	}
	for what, rw := range map[string]*dlock.RWMutex{
		"empty name":  c.RWMutex(""),
		"empty owner": c.RWMutex("x", dlock.WithOwner("")),
		"lease time":  c.RWMutex("x", dlock.WithLeaseTime(time.Millisecond)),
	} {
		if _, err := rw.RLock(ctx); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", what, err)
		}
	}
}

// A writer that stops waiting withdraws at once: readers are not held back
// until its registration would have run out.
func TestRWMutex_CancelledWaitingWriterLetsReadersInAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		reader := newClient(t, b.newRedis(t)).RWMutex(name)
		held, err := reader.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// A refresh of an hour: only the withdrawal can clear its registration.
		writer := newClient(t, b.newRedis(t), dlock.WithWaiterRefresh(time.Hour)).RWMutex(name)
		wctx, cancel := context.WithCancel(ctx)
		result := lockInBackground(wctx, writer.Lock)
		eventually(t, ctx, "the writer registering", func() bool { return inspectRW(t, ctx, reader).WritersWaiting == 1 })
		cancel()
		if err := <-result; !errors.Is(err, context.Canceled) || !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("cancelled Lock: %v", err)
		}
		if _, err := newClient(t, b.newRedis(t)).RWMutex(name).TryRLock(ctx); err != nil {
			t.Fatalf("a new reader after the writer withdrew: %v", err)
		}
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
