package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/check"
	"github.com/dlockio/dlock/internal/scripts"
)

func fairQueueKey(name string) string { return lockKey(name) + ":queue" }

// queueLen is how many waiters a FairMutex has in line.
func queueLen(t testing.TB, ctx context.Context, rdb redis.UniversalClient, name string) int64 {
	t.Helper()
	n, err := rdb.ZCard(ctx, fairQueueKey(name)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// inLine returns a channel closed once a FairMutex Lock of c has its place
// in line.
func inLine(c *dlock.Client) <-chan struct{} {
	return countAttemptsOf(c, scripts.FairAcquire).registeredReach(1)
}

// slowOwner is the owner token of a waiter the test queues by hand, which
// then does nothing: dead, or slow to take up the lock handed to it.
const slowOwner = "0123456789abcdef0123456789abcdef"

// queueRaw puts a waiter in a FairMutex's line the way a Lock would, and
// returns the KEYS of the fair scripts for the lock (with owner's tombstone).
func queueRaw(t testing.TB, ctx context.Context, rdb redis.UniversalClient, name, owner, waiterID string, lease time.Duration) []string {
	t.Helper()
	lock, fence, channel := dlock.KeysOf(dlock.DefaultPrefix, name)
	keys := []string{lock, fence, fairQueueKey(name), lock + ":waiters", channel, lock + ":holder", lock + ":void:" + owner}
	publish := "PUBLISH"
	if _, ok := rdb.(*redis.ClusterClient); ok {
		publish = "SPUBLISH"
	}
	args := scripts.FairAcquireArgs{Publish: publish, Info: "",
		Acquire: scripts.Acquire{Owner: owner, TTL: time.Minute.Milliseconds(), Waiter: waiterID, WaiterTTL: lease.Milliseconds()}}
	res, err := scripts.AcquireReply(scripts.FairAcquire.Run(ctx, rdb, keys, append(args.Append(nil), "")...)) // "": the rights checked
	if err != nil || res[0] != 0 {
		t.Fatalf("queueing a waiter by hand: %v, %v; want it refused and queued", res, err)
	}
	return keys
}

func TestFairMutex_AcquiresInArrivalOrder(t *testing.T) {
	const waiters = 6
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		name := lockName(t)
		observer := b.newRedis(t)
		holder, err := newClient(t, b.newRedis(t)).FairMutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		order := make(chan int, waiters)
		results := make([]<-chan error, waiters)
		for i := range waiters {
			c := newClient(t, b.newRedis(t))
			queued := inLine(c)
			fm := c.FairMutex(name)
			results[i] = lockInBackground(ctx, func(ctx context.Context) (*dlock.Lease, error) {
				lease, err := fm.Lock(ctx)
				if err == nil {
					order <- i
				}
				return lease, err
			})
			// The next one arrives only once this one has its place.
			waitDone(t, queued, time.Minute, "the waiter taking its place in line")
			if n := queueLen(t, ctx, observer, name); n != int64(i+1) {
				t.Fatalf("%d in line after %d waiters", n, i+1)
			}
		}
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range waiters {
			expectAcquired(t, results[i], time.Minute, "a waiter never got the lock")
			if got := <-order; got != i {
				t.Fatalf("waiter %d got the lock in turn %d", got, i)
			}
		}
	})
}

func TestFairMutex_ContendedClientsShareEvenlyWithoutOverlap(t *testing.T) {
	const clients, total = 8, 400
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		var res check.Fenced
		var mu sync.Mutex
		taken, perClient := 0, make([]int, clients)
		var seq []int
		var wg, warm sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, 2*clients)
		// Every client waits once before the count starts, behind a holder,
		// so that each is connected and subscribed: a client that took the
		// lock unopposed would not be, and would find the line empty, and
		// take the lock again, until the others had subscribed.
		holder, err := newClient(t, b.newRedis(t)).FairMutex(name).Lock(ctxFor(t, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		var lines []<-chan struct{}
		for client := range clients {
			c := newClient(t, b.newRedis(t))
			lines = append(lines, inLine(c))
			fm := c.FairMutex(name)
			wg.Add(1)
			warm.Add(1)
			go func() {
				defer wg.Done()
				ctx := ctxFor(t, 2*time.Minute)
				err := <-lockInBackground(ctx, fm.Lock)
				warm.Done()
				if err != nil {
					errs <- err
					return
				}
				<-start
				for {
					asked := time.Now()
					lease, err := fm.Lock(ctx)
					if err != nil {
						errs <- err
						return
					}
					res.Enter(client, lease.Token(), asked)
					mu.Lock()
					done := taken == total
					if !done {
						taken++
						perClient[client]++
						seq = append(seq, client)
					}
					mu.Unlock()
					res.Exit(client)
					if err := lease.Unlock(ctx); err != nil {
						errs <- err
						return
					}
					if done {
						return
					}
				}
			}()
		}
		for _, queued := range lines {
			waitDone(t, queued, time.Minute, "a client waiting behind the warm-up holder")
		}
		if err := holder.Unlock(ctxFor(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
		warm.Wait()
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if got := res.Result(); got.Overlaps != 0 || got.Stale != 0 {
			t.Fatalf("%+v; want 0 overlaps, 0 stale tokens", got)
		}
		least, most := perClient[0], perClient[0]
		for _, n := range perClient {
			least, most = min(least, n), max(most, n)
		}
		t.Logf("acquisitions per client: %v", perClient)
		if least == 0 || float64(most)/float64(least) > 1.2 {
			t.Fatalf("acquisitions per client %v: max/min above 1.2; order %v", perClient, seq)
		}
	})
}

func TestFairMutex_DeadWaiterDelaysTheNextOnlyForItsWaitLease(t *testing.T) {
	t.Parallel()
	const deadLease = time.Second
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		name := lockName(t)
		rdb := b.newRedis(t)
		holder, err := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute)).FairMutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// A waiter that queues and dies: it never renews its place nor
		// answers its wake-up.
		queueRaw(t, ctx, rdb, name, slowOwner, "dead", deadLease)
		nextClient := newClient(t, b.newRedis(t))
		queued := inLine(nextClient)
		next := lockInBackground(ctx, nextClient.FairMutex(name).Lock)
		waitDone(t, queued, time.Minute, "the live waiter taking its place in line")
		if n := queueLen(t, ctx, rdb, name); n != 2 {
			t.Fatalf("%d in line; want the dead waiter and the live one", n)
		}

		released := time.Now()
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		expectAcquired(t, next, time.Minute, "the waiter behind a dead one never got the lock")
		// The bound is the dead waiter's wait lease, against the holder's TTL
		// of a minute; the margin is for a loaded machine.
		if waited := time.Since(released); waited > deadLease+5*time.Second {
			t.Fatalf("waited %v behind a dead waiter whose place lasted %v", waited, deadLease)
		}
	})
}

func TestFairMutex_CancelledLockLeavesTheQueueAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		name := lockName(t)
		rdb := b.newRedis(t)
		holder, err := newClient(t, b.newRedis(t)).FairMutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		waitCtx, cancel := context.WithCancel(ctx)
		waiter := newClient(t, b.newRedis(t))
		queued := inLine(waiter)
		waiting := lockInBackground(waitCtx, waiter.FairMutex(name).Lock)
		waitDone(t, queued, time.Minute, "the waiter taking its place in line")
		if n := queueLen(t, ctx, rdb, name); n != 1 {
			t.Fatalf("%d in line; want the waiter", n)
		}
		cancel()
		if err := <-waiting; !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Lock returned %v", err)
		}
		if n := queueLen(t, ctx, rdb, name); n != 0 {
			t.Fatalf("%d waiters left in line after the only one was cancelled", n)
		}
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := newClient(t, b.newRedis(t)).FairMutex(name).TryLock(ctx); err != nil {
			t.Fatalf("lock not free after its holder left and its waiter gave up: %v", err)
		}
	})
}

func TestFairMutex_WaiterHandedTheLockAsItLeavesPassesItOn(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	name := lockName(t)
	rdb := backends[0].newRedis(t)
	holder, err := newClient(t, backends[0].newRedis(t)).FairMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys := queueRaw(t, ctx, rdb, name, slowOwner, "leaving", time.Minute)
	nextClient := newClient(t, backends[0].newRedis(t))
	queued := inLine(nextClient)
	next := lockInBackground(ctx, nextClient.FairMutex(name).Lock)
	waitDone(t, queued, time.Minute, "the second waiter taking its place in line")
	if n := queueLen(t, ctx, rdb, name); n != 2 {
		t.Fatalf("%d in line; want two waiters", n)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := rdb.Get(ctx, lockKey(name)).Result(); got != slowOwner {
		t.Fatalf("the release did not hand the lock to the head of the line")
	}
	// The head gives up just after the hand-over reached it.
	if n, err := scripts.FairAbandon.Run(ctx, rdb, keys,
		scripts.AbandonArgs{Owner: slowOwner, Publish: "PUBLISH", Waiter: "leaving"}.Append(nil)...).Int64(); err != nil || n != 1 {
		t.Fatalf("abandon of a handed-over lock: %v, %v; want 1", n, err)
	}
	expectAcquired(t, next, 10*time.Second, "the lock was not passed on by a waiter that left")
}

func TestFairMutex_NobodyBargesPastTheQueue(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		name := lockName(t)
		rdb := b.newRedis(t)
		releaser := newClient(t, b.newRedis(t)).FairMutex(name)
		holder, err := releaser.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// A waiter that has not taken up its hand-over yet: the moment a
		// barger would slip in.
		queueRaw(t, ctx, rdb, name, slowOwner, "slow", time.Minute)
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		for _, barger := range []*dlock.FairMutex{releaser, newClient(t, b.newRedis(t)).FairMutex(name)} {
			if l, err := barger.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryLock after a release to a waiting line: %v, %v; want ErrNotAcquired", l, err)
			}
		}
		if got, _ := rdb.Get(ctx, lockKey(name)).Result(); got != slowOwner {
			t.Fatal("the release did not hand the lock to the head of the line")
		}
	})
}

func TestFairMutex_BadInputWrongTypeAndDoubleUnlock(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb)
	for _, fm := range []*dlock.FairMutex{
		c.FairMutex(""),
		c.FairMutex("a{b}"),
		c.FairMutex("x", dlock.WithTTL(0)),
		c.FairMutex("x", dlock.WithTTL(-time.Second)),
		c.FairMutex("x", dlock.WithWaiterRefresh(0)),
		(*dlock.Client)(nil).FairMutex("x"),
	} {
		if _, err := fm.Lock(ctx); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Lock of %q: %v; want ErrInvalid", fm.Name(), err)
		}
	}

	name := lockName(t)
	if err := rdb.HSet(ctx, lockKey(name), "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FairMutex(name).Lock(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Lock on a hash: %v; want ErrWrongType", err)
	}
	if v, _ := rdb.HGet(ctx, lockKey(name), "f").Result(); v != "v" {
		t.Fatal("a failed Lock changed the foreign key")
	}

	expectSecondUnlockRefused(t, ctx, c.FairMutex(lockName(t)).Lock)
}

// A fencing counter that is not dlock's (here a word) makes the next
// hand-over impossible: the release still lets the lock go and reports
// success, and the waiter is woken and told why by its own attempt, rather
// than the release failing half done.
func TestFairMutex_ReleaseFindingAForeignCounterReleasesAndWakesTheWaiter(t *testing.T) {
	srv := startServer(t)
	ctx := ctxFor(t, 20*time.Second)
	name := lockName(t)
	holder, err := newClient(t, srv.Client()).FairMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	queuer := newClient(t, srv.Client())
	attempts := countAttemptsOf(queuer, scripts.FairAcquire)
	waiter := make(chan error, 1)
	go func() {
		_, err := queuer.FairMutex(name).Lock(ctx)
		waiter <- err
	}()
	waitDone(t, attempts.registeredReach(1), 10*time.Second, "the waiter queueing")
	if err := srv.Client().Set(ctx, lockKey(name)+":fence", "not a counter", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with a foreign counter beside the lock: %v; want released", err)
	}
	if err := <-waiter; !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(err.Error(), ":fence") {
		t.Fatalf("the waiter: %v; want ErrWrongType naming the counter", err)
	}
	if n := srv.Client().Exists(ctx, lockKey(name)).Val(); n != 0 {
		t.Fatal("the lock is still held")
	}
}

// A waiter whose queue or registrations another program replaced while it
// waits (without a TTL, or of another type with one) fails with
// ErrWrongType at its next attempt, naming the key, and leaves the value
// as it was: its attempts queue behind the holder without a TYPE probe,
// so the PTTL and the ZADDs' errors must tell.
func TestFairMutex_AQueuedWaiterFindingForeignQueueKeysFailsAndLeavesThem(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb, dlock.WithTTL(time.Minute), dlock.WithWaiterRefresh(20*time.Millisecond))
	for _, suffix := range []string{":queue", ":waiters"} {
		for kind, write := range foreignValues {
			for _, ttl := range []time.Duration{0, time.Hour} {
				if ttl > 0 && strings.Contains(kind, "zset") {
					continue // a zset with a TTL is what dlock writes there
				}
				name := lockName(t)
				key := lockKey(name) + suffix
				what := fmt.Sprintf("a %s (TTL %v) under %s", kind, ttl, key)
				held, err := c.FairMutex(name).Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() {
					l, err := c.FairMutex(name).Lock(ctx)
					if err == nil {
						_ = l.Unlock(ctx)
					}
					done <- err
				}()
				eventually(t, ctx, what+": registration", func() bool { return rdb.Exists(ctx, key).Val() == 1 })
				rdb.Del(ctx, key)
				if err := write(ctx, rdb, key); err != nil {
					t.Fatal(err)
				}
				if ttl > 0 {
					rdb.Expire(ctx, key, ttl)
				}
				dump := rdb.Dump(ctx, key).Val()
				if err := <-done; !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(err.Error(), key) {
					t.Errorf("%s: the waiter's Lock: %v; want ErrWrongType naming the key", what, err)
				}
				if rdb.Dump(ctx, key).Val() != dump {
					t.Errorf("%s: changed", what)
				}
				if pttl := rdb.PTTL(ctx, key).Val(); (ttl == 0) != (pttl == -1) {
					t.Errorf("%s: its PTTL is now %v", what, pttl)
				}
				rdb.Del(ctx, key)
				_ = held.Unlock(ctx)
			}
		}
	}
}

// A TryLock on a lock another holds, beside a fencing counter another
// program replaced with a string that is no counter, fails with
// ErrWrongType naming the counter and changes nothing, as it did where
// nobody queues: it does not answer ErrNotAcquired as if the counter were
// dlock's.
func TestFairMutex_TryLockOnAHeldLockBesideAForeignCounterFailsWithWrongType(t *testing.T) {
	ctx := ctxFor(t, 20*time.Second)
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb, dlock.WithTTL(time.Minute))
	name := lockName(t)
	held, err := c.FairMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := lockKey(name) + ":fence"
	if err := rdb.Set(ctx, key, "my-precious-data", 0).Err(); err != nil {
		t.Fatal(err)
	}
	lockTTL := rdb.PTTL(ctx, lockKey(name)).Val()
	l, err := c.FairMutex(name).TryLock(ctx)
	if err == nil {
		_ = l.Unlock(ctx)
	}
	if !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(err.Error(), key) {
		t.Errorf("TryLock beside a foreign counter: %v; want ErrWrongType naming %s", err, key)
	}
	if v := rdb.Get(ctx, key).Val(); v != "my-precious-data" {
		t.Errorf("the foreign counter is now %q", v)
	}
	if ttl := rdb.PTTL(ctx, lockKey(name)).Val(); ttl > lockTTL {
		t.Errorf("the hold's TTL went from %v to %v", lockTTL, ttl)
	}
	rdb.Del(ctx, key)
	_ = held.Unlock(ctx)
}
