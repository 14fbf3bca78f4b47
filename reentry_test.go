package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/check"
)

// Re-entry follows the context, not the handle: goroutines sharing one
// ReentrantMutex or RWMutex handle, as they share a sync.RWMutex, are
// separate owners, and a Lock re-enters only when its context carries a
// live hold of the same lock (Lease.Context).

// mostInside counts who is inside a critical section, and the most at once.
type mostInside struct{ inside, most atomic.Int64 }

func (m *mostInside) enter() {
	n := m.inside.Add(1)
	for most := m.most.Load(); n > most && !m.most.CompareAndSwap(most, n); most = m.most.Load() {
	}
}

func (m *mostInside) exit() { m.inside.Add(-1) }

// workUnderLock stands for the work done under the lock: long enough for the
// goroutines' critical sections to overlap if the lock let them.
const workUnderLock = 2 * time.Millisecond

func TestRWMutex_GoroutinesSharingOneHandleGetExclusion(t *testing.T) {
	const workers, rounds = 4, 10
	for _, mix := range []string{"writers", "readers and writers"} {
		t.Run(mix, func(t *testing.T) {
			rw := newClient(t, backends[0].newRedis(t)).RWMutex(lockName(t))
			var writers mostInside
			var res check.Shared
			runWorkers(t, workers, func(ctx context.Context, w int) error {
				for round := range rounds {
					write := mix == "writers" || (round+w)%2 == 0
					lock := rw.RLock
					if write {
						lock = rw.Lock
					}
					asked := time.Now()
					lease, err := lock(ctx)
					if err != nil {
						return err
					}
					if write {
						writers.enter()
						res.EnterWrite(lease.Token(), asked)
					} else {
						res.EnterRead(asked)
					}
					time.Sleep(workUnderLock)
					if write {
						res.ExitWrite()
						writers.exit()
					} else {
						res.ExitRead()
					}
					if err := lease.Unlock(ctx); err != nil {
						return err
					}
				}
				return nil
			})
			if most := writers.most.Load(); most != 1 {
				t.Errorf("max writers inside at once = %d, want 1", most)
			}
			if r := res.Result(); r.Conflicts != 0 || r.Stale != 0 {
				t.Errorf("%+v: want no conflicts, writers' tokens increasing", r)
			}
		})
	}
}

// Each goroutine also re-enters its own hold through its lease's context:
// the nested hold shares the token, and nobody else gets in meanwhile.
func TestReentrantMutex_GoroutinesSharingOneHandleGetExclusion(t *testing.T) {
	const workers, rounds = 4, 10
	m := newClient(t, backends[0].newRedis(t)).ReentrantMutex(lockName(t))
	var inside mostInside
	var res check.Fenced
	runWorkers(t, workers, func(ctx context.Context, w int) error {
		for range rounds {
			asked := time.Now()
			outer, err := m.Lock(ctx)
			if err != nil {
				return err
			}
			inside.enter()
			res.Enter(w, outer.Token(), asked)
			inner, err := m.Lock(outer.Context(ctx))
			if err == nil && inner.Token() != outer.Token() {
				err = fmt.Errorf("the nested hold has token %d, the outer %d", inner.Token(), outer.Token())
			}
			time.Sleep(workUnderLock)
			if inner != nil {
				err = errors.Join(err, inner.Unlock(ctx))
			}
			res.Exit(w)
			inside.exit()
			if err := errors.Join(err, outer.Unlock(ctx)); err != nil {
				return err
			}
		}
		return nil
	})
	if most := inside.most.Load(); most != 1 {
		t.Errorf("max holders inside at once = %d, want 1", most)
	}
	if r := res.Result(); r.Overlaps != 0 || r.Stale != 0 || r.Completed != workers*rounds {
		t.Errorf("%+v: want %d critical sections, no overlaps, tokens increasing", r, workers*rounds)
	}
}

func TestReentrantMutex_ReentersThroughTheLeaseContext(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		rdb := b.newRedis(t)
		c := newClient(t, rdb)
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		m := c.ReentrantMutex(name)

		outer, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock through the holder's handle, with a context that carries no hold: %v, want ErrNotAcquired", err)
		}
		outerCtx := outer.Context(ctx)
		inner, err := m.Lock(outerCtx)
		if err != nil {
			t.Fatal(err)
		}
		innerCtx := inner.Context(outerCtx)
		// Another handle of the Client re-enters too, and so does the
		// write side of the RWMutex of the same name: the hold is in the
		// context, whatever handle it goes through.
		third, err := c.ReentrantMutex(name).TryLock(innerCtx)
		if err != nil {
			t.Fatalf("another handle, with the hold's context: %v", err)
		}
		fourth, err := c.RWMutex(name).TryLock(outerCtx)
		if err != nil {
			t.Fatalf("the RWMutex's write side, with the hold's context: %v", err)
		}
		for i, l := range []*dlock.Lease{inner, third, fourth} {
			if l.Token() != outer.Token() {
				t.Fatalf("nested hold %d has token %d, the first %d", i+2, l.Token(), outer.Token())
			}
		}
		if s := inspectReentrant(t, innerCtx, m); !s.WriterIsOwner || s.WriteHolds != 4 || s.WriteToken != outer.Token() {
			t.Fatalf("seen with the hold's context: %+v, want held by this owner 4 times", s)
		}
		if s := inspectReentrant(t, ctx, m); s.WriterIsOwner || s.WriteHolds != 4 {
			t.Fatalf("seen without a hold: %+v, want held 4 times by another owner", s)
		}

		// Unlock in any order: the lock is held until the last hold goes.
		waiter := lockInBackground(ctx, m.Lock)
		eventually(t, ctx, "the other owner waiting", func() bool { return inspectReentrant(t, ctx, m).WritersWaiting == 1 })
		for i, l := range []*dlock.Lease{outer, third, inner, fourth} {
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if i < 3 {
				if s := inspectReentrant(t, ctx, m); s.WriteHolds != 3-i {
					t.Fatalf("after %d unlocks: %+v, want %d holds", i+1, s, 3-i)
				}
			}
		}
		if err := outerCtx.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("the outer lease's context after its Unlock: %v", err)
		}
		expectAcquired(t, waiter, 10*time.Second, "the other owner was not woken by the last hold's release")
	})
}

func TestReentrantMutex_ContextOfAnotherLockDoesNotReenter(t *testing.T) {
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb)
	name := lockName(t)
	ctx := ctxFor(t, 30*time.Second)
	m := c.ReentrantMutex(name)
	held, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	another, err := c.ReentrantMutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryLock(another.Context(ctx)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock with a hold of another name in its context: %v, want ErrNotAcquired", err)
	}
	// The same name under another prefix is another lock.
	elsewhere, err := newClient(t, rdb, dlock.WithPrefix("other:")).ReentrantMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryLock(elsewhere.Context(ctx)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock with a hold of the name under another prefix: %v, want ErrNotAcquired", err)
	}
	// Another Client of the same Redis names the same lock: it re-enters.
	again, err := newClient(t, rdb).ReentrantMutex(name).TryLock(held.Context(ctx))
	if err != nil || again.Token() != held.Token() {
		t.Fatalf("another Client with the hold's context: %v, want a re-entry", err)
	}
}

// A context that carries a lease that has ended, released or lost, carries
// no hold: a Lock with it is a new owner, even while holds the lease's owner
// took with it live on. (A lease's own Context is cancelled when it ends;
// context.WithoutCancel keeps its values.)
func TestReentrantMutex_ContextOfAnEndedLeaseDoesNotReenter(t *testing.T) {
	c := newClient(t, backends[0].newRedis(t))
	ctx := ctxFor(t, 30*time.Second)
	for _, end := range []string{"released", "lost"} {
		t.Run(end, func(t *testing.T) {
			name := lockName(t)
			opts := []dlock.Option{}
			if end == "lost" {
				opts = append(opts, dlock.WithLeaseTime(300*time.Millisecond)) // never renewed
			}
			first, err := c.ReentrantMutex(name, opts...).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			carrying := context.WithoutCancel(first.Context(ctx))
			m := c.ReentrantMutex(name)
			second, err := m.TryLock(carrying)
			if err != nil || second.Token() != first.Token() {
				t.Fatalf("re-entry while the first hold lives: %v", err)
			}
			if end == "released" {
				if err := first.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				waitDone(t, first.Done(), 10*time.Second, "the fixed-time lease ending")
				if !errors.Is(first.Err(), dlock.ErrLeaseLost) {
					t.Fatalf("the fixed-time lease ended with %v, want ErrLeaseLost", first.Err())
				}
			}
			if _, err := m.TryLock(carrying); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryLock with the %s lease's context while its owner's second hold lives: %v, want ErrNotAcquired", end, err)
			}
			if err := second.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The hold a context carries is the lease, which prints without its secret:
// a context printed in a log shows no hold id.
func TestRWMutex_AContextCarryingAHoldPrintsNoSecret(t *testing.T) {
	rdb := backends[0].newRedis(t)
	ctx := ctxFor(t, 30*time.Second)
	name := lockName(t)
	lease, err := newClient(t, rdb).RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	members, err := rdb.ZRange(ctx, lockKey(name)+":holds", 0, -1).Result()
	if err != nil || len(members) != 1 {
		t.Fatalf("holds %v, %v", members, err)
	}
	holdID := members[0][1:33] // mode, hold id, owner: see rw_lib.lua
	holding := lease.Context(ctx)
	for _, s := range []string{fmt.Sprint(holding), fmt.Sprintf("%+v %#v", holding, holding)} {
		if strings.Contains(s, holdID) {
			t.Fatalf("the hold id leaked into: %s", s)
		}
	}
}

// A context carrying a hold of a lock on one Redis carries no hold of the
// lock of the same prefix and name on another Redis, nor in another
// database of the same server: a Lock there is an owner of its own, and
// does not join a hold some other goroutine took there with the same
// context.
func TestReentrantMutex_ContextOfTheSameNameOnAnotherRedisDoesNotReenter(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	name := lockName(t)
	a := newClient(t, backends[0].newRedis(t))
	held, err := a.ReentrantMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	carrying := held.Context(ctx)
	other := startServer(t)
	elsewhere := map[string]redis.UniversalClient{
		"another server":   redis.NewClient(&redis.Options{Addr: other.Addr()}),
		"another database": redis.NewClient(&redis.Options{Addr: sharedStandalone().Addr(), DB: 1}),
	}
	for what, rdb := range elsewhere {
		t.Run(what, func(t *testing.T) {
			t.Cleanup(func() { _ = rdb.Close() })
			m := newClient(t, rdb).ReentrantMutex(name)
			first, err := m.Lock(carrying) // free there: taken, as an owner of its own
			if err != nil {
				t.Fatal(err)
			}
			if second, err := m.TryLock(carrying); !errors.Is(err, dlock.ErrNotAcquired) {
				if second != nil {
					_ = second.Unlock(ctx)
				}
				t.Fatalf("TryLock with a context carrying a hold of the name on another Redis: %v, want ErrNotAcquired", err)
			}
			if err := first.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Clients on go-redis clients of their own, of the same server and
// database (or the same cluster), name the same lock: a context's hold
// re-enters through either.
func TestReentrantMutex_AnotherGoRedisClientOfTheSameRedisReenters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, 30*time.Second)
		name := lockName(t)
		held, err := newClient(t, b.newRedis(t)).ReentrantMutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		again, err := newClient(t, b.newRedis(t)).ReentrantMutex(name).TryLock(held.Context(ctx))
		if err != nil || again.Token() != held.Token() {
			t.Fatalf("a Client on another go-redis client of the same Redis: %v, want a re-entry", err)
		}
	})
}
