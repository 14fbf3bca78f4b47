package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/scripts"
)

func inspectReentrant(t *testing.T, ctx context.Context, m *dlock.ReentrantMutex) dlock.RWState {
	t.Helper()
	s, err := m.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestReentrantMutex_NestedHoldsShareTheTokenAndFreeAtZero(t *testing.T) {
	const depth = 10
	forEachBackend(t, func(t *testing.T, b backend) {
		rdb := b.newRedis(t)
		c := newClient(t, rdb)
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		m := c.ReentrantMutex(name)
		other := c.ReentrantMutex(name) // another owner

		var leases []*dlock.Lease
		holding := ctx // each hold is taken with the context of the one before
		for i := range depth {
			lease, err := m.Lock(holding)
			if err != nil {
				t.Fatal(err)
			}
			if i > 0 && lease.Token() != leases[0].Token() {
				t.Fatalf("hold %d has token %d, the first %d", i+1, lease.Token(), leases[0].Token())
			}
			leases = append(leases, lease)
			holding = lease.Context(holding)
			if s := inspectReentrant(t, holding, m); !s.WriterIsOwner || s.WriteHolds != i+1 || s.WriteToken != leases[0].Token() {
				t.Fatalf("after %d holds: %+v", i+1, s)
			}
		}
		if _, err := other.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("another owner's TryLock while held: %v, want ErrNotAcquired", err)
		}
		waiter := lockInBackground(ctx, other.Lock)

		for i, lease := range leases {
			if n, _ := rdb.Exists(ctx, lockKey(name)).Result(); n != 1 {
				t.Fatalf("the lock's key is gone with %d holds left", depth-i)
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("second Unlock of one hold: %v, want ErrNotHeld", err)
			}
			if s := inspectReentrant(t, ctx, other); i < depth-1 && s.WriteHolds != depth-i-1 {
				t.Fatalf("count %d after %d unlocks, want %d", s.WriteHolds, i+1, depth-i-1)
			}
		}
		expectAcquired(t, waiter, 10*time.Second, "the other owner was not woken when the count reached zero")
		if n, _ := rdb.Exists(ctx, lockKey(name), lockKey(name)+":holds").Result(); n != 0 {
			t.Fatal("the lock's keys outlived its last hold")
		}
	})
}

func TestReentrantMutex_ForeignUnlockIsRefusedAndChangesNothing(t *testing.T) {
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb)
	name := lockName(t)
	ctx := ctxFor(t, 30*time.Second)

	// bob's lease expires (fixed lease time, never renewed); alice takes over.
	bob, err := c.ReentrantMutex(name, dlock.WithLeaseTime(200*time.Millisecond)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	alice := c.ReentrantMutex(name)
	first, err := alice.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	alicesCtx := first.Context(ctx)
	if _, err := alice.Lock(alicesCtx); err != nil {
		t.Fatal(err)
	}
	holds := lockKey(name) + ":holds"
	before, _ := rdb.ZRangeWithScores(ctx, holds, 0, -1).Result()

	if err := bob.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("unlock by the owner whose hold expired: %v, want ErrNotHeld", err)
	}
	after, _ := rdb.ZRangeWithScores(ctx, holds, 0, -1).Result()
	if len(after) != 2 || after[0] != before[0] || after[1] != before[1] {
		t.Fatalf("a foreign unlock changed the holds from %v to %v", before, after)
	}
	if s := inspectReentrant(t, alicesCtx, alice); s.WriteHolds != 2 || !s.WriterIsOwner {
		t.Fatalf("after a foreign unlock: %+v, want alice holding twice", s)
	}
}

// A holder that crashed three holds deep frees the lock once its holds'
// TTL has passed, and not before.
func TestReentrantMutex_CrashedHolderAtDepthThreeFreesAfterItsTTL(t *testing.T) {
	const ttl = 300 * time.Millisecond
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		crashed := newClient(t, b.newRedis(t), dlock.WithLeaseTime(ttl)).ReentrantMutex(name)
		holding := ctx
		for range 3 {
			lease, err := crashed.TryLock(holding)
			if err != nil {
				t.Fatal(err)
			}
			holding = lease.Context(holding)
		}
		lastHold := time.Now()
		next := newClient(t, b.newRedis(t), dlock.WithWaiterRefresh(50*time.Millisecond)).ReentrantMutex(name)
		if _, err := next.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		// The third hold expires TTL after Redis applied it, a little before
		// its reply came back.
		if waited := time.Since(lastHold); waited < ttl*3/4 || waited > ttl+5*time.Second {
			t.Fatalf("the next owner got the lock %v after the crashed owner's last hold, want about %v", waited, ttl)
		}
	})
}

func TestReentrantMutex_WithOwnerActsAsOneOwnerAcrossClients(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		first := newClient(t, b.newRedis(t)).ReentrantMutex(name, dlock.WithOwner("deploy-job"))
		second := newClient(t, b.newRedis(t)).ReentrantMutex(name, dlock.WithOwner("deploy-job"))
		stranger := newClient(t, b.newRedis(t)).ReentrantMutex(name)
		if second.Owner() != "deploy-job" || stranger.Owner() != "" {
			t.Fatalf("owners %q, %q, %q", first.Owner(), second.Owner(), stranger.Owner())
		}
		l1, err := first.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		l2, err := second.TryLock(ctx)
		if err != nil {
			t.Fatalf("the same owner through another client: %v", err)
		}
		if l2.Token() != l1.Token() {
			t.Fatalf("tokens %d and %d, want the same", l1.Token(), l2.Token())
		}
		if _, err := stranger.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("another owner: %v, want ErrNotAcquired", err)
		}
		if s := inspectReentrant(t, ctx, stranger); s.WriteHolds != 2 || s.WriterIsOwner {
			t.Fatalf("seen by the stranger: %+v", s)
		}
	})
}

// resendAcquire is a go-redis hook that sends every RW acquire twice, as a
// client library does when it retries a command after a timeout.
type resendAcquire struct{}

func (resendAcquire) DialHook(next redis.DialHook) redis.DialHook { return next }
func (resendAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if runs(cmd, scripts.RWAcquire) {
			_ = next(ctx, cmd)
		}
		return next(ctx, cmd)
	}
}
func (resendAcquire) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestReentrantMutex_AcquireReachingRedisTwiceCountsOnce(t *testing.T) {
	rdb := backends[0].newRedis(t)
	rdb.AddHook(resendAcquire{})
	c := newClient(t, rdb)
	name := lockName(t)
	ctx := ctxFor(t, 30*time.Second)
	m := c.ReentrantMutex(name, dlock.WithOwner("twice"))
	first, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second, err := m.Lock(ctx) // the same owner, as WithOwner says
	if err != nil {
		t.Fatal(err)
	}
	// Inspect counts the holds; the scripts decide by the owner's count in
	// the lock's hash (see internal/scripts/rw_lib.lua): both must say two.
	if s := inspectReentrant(t, ctx, m); s.WriteHolds != 2 {
		t.Fatalf("count %d after two acquires each sent twice, want 2", s.WriteHolds)
	}
	if n, _ := rdb.HGet(ctx, lockKey(name), "nw"+m.Owner()).Int(); n != 2 {
		t.Fatalf("the lock's own count is %d after two acquires each sent twice, want 2", n)
	}
	if n, _ := rdb.Get(ctx, lockKey(name)+":fence").Uint64(); n != first.Token() {
		t.Fatalf("fencing counter %d, want the one token minted, %d", n, first.Token())
	}
	for _, l := range []*dlock.Lease{first, second} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := rdb.Exists(ctx, lockKey(name)).Result(); n != 0 {
		t.Fatal("the lock outlived its two unlocks")
	}
}

func TestReentrantMutex_BadInputAndWrongTypeFail(t *testing.T) {
	rdb := backends[0].newRedis(t)
	counter := &commandCounter{}
	rdb.AddHook(counter)
	c := newClient(t, rdb)
	ctx := ctxFor(t, 30*time.Second)
	for what, m := range map[string]*dlock.ReentrantMutex{
		"empty name":       c.ReentrantMutex(""),
		"empty owner":      c.ReentrantMutex("x", dlock.WithOwner("")),
		"zero TTL":         c.ReentrantMutex("x", dlock.WithTTL(0)),
		"negative TTL":     c.ReentrantMutex("x", dlock.WithTTL(-time.Second)),
		"brace in name":    c.ReentrantMutex("a}b"),
		"nil dlock.Client": (*dlock.Client)(nil).ReentrantMutex("x"),
	} {
		if _, err := m.Lock(ctx); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: Lock gave %v, want ErrInvalid", what, err)
		}
		if _, err := m.Inspect(ctx); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: Inspect gave %v, want ErrInvalid", what, err)
		}
	}
	if n := counter.commands.Load(); n != 0 {
		t.Fatalf("%d commands sent for bad input", n)
	}

	name := lockName(t)
	rdb.Set(ctx, lockKey(name), "a string", 0)
	if _, err := c.ReentrantMutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("TryLock on a string key: %v, want ErrWrongType", err)
	}
	if _, err := c.ReentrantMutex(name).Lock(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Lock on a string key: %v, want ErrWrongType", err)
	}
	if v, _ := rdb.Get(ctx, lockKey(name)).Result(); v != "a string" {
		t.Fatal("the foreign value was changed")
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.ReentrantMutex(lockName(t)).Lock(cancelled); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with a cancelled context: %v, want ErrNotAcquired and context.Canceled", err)
	}
}
