package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/check"
	"github.com/dlockio/dlock/internal/scripts"
)

// lockNames are n lock names no other test uses.
func lockNames(t testing.TB, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = lockName(t)
	}
	return names
}

// expectFree fails the test when any of the locks is held.
func expectFree(t testing.TB, ctx context.Context, rdb redis.UniversalClient, names ...string) {
	t.Helper()
	for _, name := range names {
		if n := rdb.Exists(ctx, lockKey(name)).Val(); n != 0 {
			t.Fatalf("lock %q is held", name)
		}
	}
}

func TestClusterSlot_MatchesTheCluster(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	rdb := backends[1].newRedis(t)
	for _, name := range []string{"a", "orders:42", "ü", lockName(t), "123456789"} {
		want, err := rdb.ClusterKeySlot(ctx, lockKey(name)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := dlock.ClusterSlot(name); int64(got) != want {
			t.Errorf("slot of %q: %d; the cluster says %d", name, got, want)
		}
	}
}

func TestMultiLock_TakesAllOrNone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		rdb := b.newRedis(t)
		c := newClient(t, rdb)
		names := lockNames(t, 5)
		for _, held := range names {
			mu, err := c.Mutex(held).TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if l, err := c.MultiLock(names).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryLock with %q held: %v, %v; want ErrNotAcquired", held, l, err)
			}
			if err := mu.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			expectFree(t, ctx, rdb, names...)
		}
		lease, err := c.MultiLock(names).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("Mutex %q while the MultiLock holds it: %v; want ErrNotAcquired", name, err)
			}
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		expectFree(t, ctx, rdb, names...)
	})
}

func TestMultiLock_OverlappingSetsInOppositeOrdersNeverDeadlock(t *testing.T) {
	const rounds = 40
	forEachBackend(t, func(t *testing.T, b backend) {
		names := lockNames(t, 4)
		reversed := slices.Clone(names)
		slices.Reverse(reversed)
		sets := [][]string{names[:3], reversed[:3], {names[3], names[0]}, names[1:]}
		resources := make(map[string]*check.Fenced)
		for _, name := range names {
			resources[name] = new(check.Fenced)
		}
		multis := make([]*dlock.MultiLock, len(sets))
		for i, set := range sets {
			multis[i] = newClient(t, b.newRedis(t)).MultiLock(set)
		}
		// A deadlock would hold every worker until its context's guard.
		runWorkers(t, len(multis), func(ctx context.Context, worker int) error {
			for range rounds {
				asked := time.Now()
				lease, err := multis[worker].Lock(ctx)
				if err != nil {
					return err
				}
				for name, token := range lease.Tokens() {
					resources[name].Enter(worker, token, asked)
				}
				for name := range lease.Tokens() {
					resources[name].Exit(worker)
				}
				if err := lease.Unlock(ctx); err != nil {
					return err
				}
			}
			return nil
		})
		for name, res := range resources {
			if got := res.Result(); got.Overlaps != 0 || got.Stale != 0 {
				t.Fatalf("%s: %+v; want 0 overlaps, 0 stale tokens", name, got)
			}
		}
	})
}

func TestMultiLock_CancelledMidwayLeavesNoPartialHold(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		rdb := b.newRedis(t)
		names := lockNames(t, 6)
		// Hold the lock a cluster takes last (the highest slot), so that the
		// MultiLock has taken the others when it waits.
		last := slices.MaxFunc(names, func(x, y string) int { return dlock.ClusterSlot(x) - dlock.ClusterSlot(y) })
		holder, err := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute)).Mutex(last).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		waiter := newClient(t, b.newRedis(t))
		waiting := countAttemptsOf(waiter, scripts.MultiAcquire).registeredReach(1)
		waitCtx, cancel := context.WithCancel(ctx)
		result := lockInBackground(waitCtx, waiter.MultiLock(names).Lock)
		waitDone(t, waiting, time.Minute, "the MultiLock waiting")
		cancel()
		if err := <-result; !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Lock: %v", err)
		}
		others := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == last })
		expectFree(t, ctx, rdb, others...)
		if n := rdb.ZCard(ctx, lockKey(last)+":waiters").Val(); n != 0 {
			t.Fatalf("%d waiters left registered on the held lock", n)
		}
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestMultiLock_WaiterFollowsTheLockInItsWay(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		names := lockNames(t, 2)
		// In the order the MultiLock takes them: by name, and on a cluster
		// slot after slot.
		slices.Sort(names)
		if b.name == "cluster" {
			slices.SortStableFunc(names, func(x, y string) int { return dlock.ClusterSlot(x) - dlock.ClusterSlot(y) })
		}
		holders := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute))
		var held []*dlock.Lease
		for _, name := range names {
			l, err := holders.Mutex(name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l)
		}
		// Neither the holders' TTL nor the waiter's refresh ends within the
		// guard: only wake-ups can let it in.
		waiter := newClient(t, b.newRedis(t), dlock.WithWaiterRefresh(time.Hour))
		attempts := countAttemptsOf(waiter, scripts.MultiAcquire)
		registered := attempts.registeredReach(1)
		result := lockInBackground(ctx, waiter.MultiLock(names).Lock)
		waitDone(t, registered, time.Minute, "the MultiLock registering")
		// Released in turn: each release finds the waiter registered on it
		// (it tries each lock first before subscribing, then registers).
		for i, l := range held {
			next := attempts.refusedReach(int64(4 + 2*i))
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if i < len(held)-1 {
				waitDone(t, next, 20*time.Second, "the MultiLock moving on to the next lock in its way")
			}
		}
		expectAcquired(t, result, 20*time.Second, "the MultiLock was not woken by the last release")
	})
}

func TestMultiLock_LeaseIsLostWhenAnyLockIsLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		rdb := b.newRedis(t)
		c := newClient(t, rdb, dlock.WithTTL(300*time.Millisecond))
		names := lockNames(t, 4)
		lease, err := c.MultiLock(names).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tokens := lease.Tokens()
		if len(tokens) != len(names) {
			t.Fatalf("tokens %v; want one per name of %v", tokens, names)
		}
		for _, name := range names {
			_, fence, _ := dlock.KeysOf(dlock.DefaultPrefix, name)
			if want, _ := rdb.Get(ctx, fence).Uint64(); tokens[name] != want {
				t.Fatalf("token of %q: %d; its counter is at %d", name, tokens[name], want)
			}
		}
		if _, err := c.ForceUnlock(ctx, names[2]); err != nil {
			t.Fatal(err)
		}
		waitDone(t, lease.Done(), lossGuard, "the loss of one lock ending the lease")
		if !errors.Is(lease.Err(), dlock.ErrLeaseLost) {
			t.Fatalf("Err after one lock was removed: %v; want ErrLeaseLost", lease.Err())
		}
		if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("Unlock of a lost MultiLock lease: %v; want ErrNotHeld", err)
		}
		expectFree(t, ctx, rdb, names...)
	})
}

func TestMultiLock_BadInputWrongTypeAndDoubleUnlock(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb)
	for _, ml := range []*dlock.MultiLock{
		c.MultiLock(nil),
		c.MultiLock([]string{"a", ""}),
		c.MultiLock([]string{"a", "b{c}"}),
		c.MultiLock([]string{"a"}, dlock.WithTTL(0)),
		(*dlock.Client)(nil).MultiLock([]string{"a"}),
	} {
		if _, err := ml.Lock(ctx); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Lock of %q: %v; want ErrInvalid", ml.Names(), err)
		}
	}
	if got := c.MultiLock([]string{"b", "a", "b"}).Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("names %v; want sorted, each once", got)
	}

	names := lockNames(t, 3)
	if err := rdb.HSet(ctx, lockKey(names[1]), "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	dump := rdb.Dump(ctx, lockKey(names[1])).Val()
	if _, err := c.MultiLock(names).Lock(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Lock with a hash under one name: %v; want ErrWrongType", err)
	}
	if rdb.Dump(ctx, lockKey(names[1])).Val() != dump {
		t.Fatal("a failed Lock changed the foreign key")
	}
	expectFree(t, ctx, rdb, names[0], names[2])

	expectSecondUnlockRefused(t, ctx, c.MultiLock(lockNames(t, 2)).Lock)
}

// A MultiLock across slots takes its groups one after another. A fixed
// lease taken on the first group runs out while the MultiLock waits for a
// later one; Lock must not return it lost, nor while another client holds
// the first lock, but hold every lock with time left when it returns.
func TestMultiLock_FixedLeaseRunningOutWhileWaitingIsNotReturned(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	b := backends[1]
	rdb := b.newRedis(t)
	first, last := lockName(t), lockName(t)
	for dlock.ClusterSlot(first) == dlock.ClusterSlot(last) {
		last = lockName(t)
	}
	if dlock.ClusterSlot(first) > dlock.ClusterSlot(last) {
		first, last = last, first
	}
	others := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute))
	holder, err := others.Mutex(last).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const leaseTime = time.Second
	// No refresh within the test: each registration counted is a new one.
	waiter := newClient(t, b.newRedis(t), dlock.WithLeaseTime(leaseTime), dlock.WithWaiterRefresh(time.Hour))
	attempts := countAttemptsOf(waiter, scripts.MultiAcquire)
	waiting, waitingAgain := attempts.registeredReach(1), attempts.registeredReach(2)
	type result struct {
		lease *dlock.Lease
		err   error
	}
	results := make(chan result, 1)
	go func() {
		l, err := waiter.MultiLock([]string{first, last}).Lock(ctx)
		results <- result{l, err}
	}()
	// Registered on the last lock, the MultiLock holds the first; once that
	// runs out, another client takes it, and only then is the last released.
	waitDone(t, waiting, 30*time.Second, "the MultiLock waiting for the last lock")
	eventually(t, ctx, "the first lock's lease running out", func() bool {
		return rdb.Exists(ctx, lockKey(first)).Val() == 0
	})
	thief, err := others.Mutex(first).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-results:
		t.Fatalf("Lock returned (%v, %v) while another client holds %q; lease Err: %v",
			r.lease, r.err, first, func() error {
				if r.lease != nil {
					return r.lease.Err()
				}
				return nil
			}())
	case <-waitingAgain:
	}
	if err := thief.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-results:
	case <-time.After(30 * time.Second):
		t.Fatal("the MultiLock did not take the locks once they were free")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.lease.Err(); err != nil {
		t.Fatalf("Lock returned a lease already lost: %v", err)
	}
	for _, name := range []string{first, last} {
		if ttl := rdb.PTTL(ctx, lockKey(name)).Val(); ttl <= 0 || ttl > leaseTime {
			t.Errorf("TTL of %q: %v; want in (0, %v]", name, ttl, leaseTime)
		}
		if l, err := others.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("another client's TryLock of %q: %v, %v; want ErrNotAcquired", name, l, err)
		}
	}
	if err := r.lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A MultiLock's acquire reads its group's counters together and tells a
// missing one from one of another type by counting the keys there: a
// counter of another type under any lock of the group, where the others
// are missing or minted before, is refused with ErrWrongType naming it,
// and nothing of the group changes. A release reads its locks together:
// a lock that holds another type now fails it as before, changing nothing.
func TestMultiLock_ForeignCounterOrLockUnderAnyPartChangesNothing(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	rdb := startServer(t).Client()
	c := newClient(t, rdb, dlock.WithTTL(time.Minute))
	for _, minted := range []bool{false, true} {
		for i := range 3 {
			names := lockNames(t, 3)
			slices.Sort(names)
			if minted { // the other counters hold tokens
				l, err := c.MultiLock(names).Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			key := lockKey(names[i]) + ":fence"
			rdb.Del(ctx, key)
			if err := rdb.HSet(ctx, key, "f", "v").Err(); err != nil {
				t.Fatal(err)
			}
			before := dumpKeys(t, ctx, rdb, names)
			_, err := c.MultiLock(names).TryLock(ctx)
			if !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(err.Error(), key) {
				t.Errorf("minted %v, a hash under %s: %v; want ErrWrongType naming it", minted, key, err)
			}
			if after := dumpKeys(t, ctx, rdb, names); !maps.Equal(before, after) {
				t.Errorf("minted %v, a hash under %s: keys changed: %v", minted, key, keysDiff(before, after))
			}
		}
	}
	for i := range 3 {
		names := lockNames(t, 3)
		slices.Sort(names)
		l, err := c.MultiLock(names).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		key := lockKey(names[i])
		rdb.Del(ctx, key)
		if err := rdb.HSet(ctx, key, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		before := dumpKeys(t, ctx, rdb, names)
		if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrWrongType) {
			t.Errorf("Unlock with a hash under %s: %v; want ErrWrongType", key, err)
		}
		if after := dumpKeys(t, ctx, rdb, names); !maps.Equal(before, after) {
			t.Errorf("Unlock with a hash under %s: keys changed: %v", key, keysDiff(before, after))
		}
	}
}

// A group of up to 3,999 names on one server is taken and released: one
// EXISTS asks every key of a group of up to 2,600 (Lua unpacks fewer than
// 8,000 values), a larger one takes the long way.
func TestMultiLock_ALargeGroupIsTakenAndReleased(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	c := newClient(t, startServer(t).Client(), dlock.WithTTL(time.Minute))
	for _, n := range []int{2600, 2601, 3999} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("big%d-%05d", n, i)
		}
		tail := func(err error) string { // its message names every lock
			return err.Error()[max(0, len(err.Error())-160):]
		}
		l, err := c.MultiLock(names).TryLock(ctx)
		if err != nil {
			t.Errorf("TryLock of %d names: ...%s", n, tail(err))
			continue
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock of %d names: ...%s", n, tail(err))
		}
	}
}
