package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/linear"
)

// mutexCalls are the two calls a history records, on some lock.
type mutexCalls struct {
	tryLock func(ctx context.Context) (token uint64, err error)
	unlock  func(ctx context.Context) error
}

// recordTry and recordUnlock run a call and add it to h as the model sees it.
func recordTry(ctx context.Context, h *linear.History, client int, owner string, m mutexCalls) bool {
	done := h.Call(client, linear.MutexOp{Owner: owner})
	token, err := m.tryLock(ctx)
	switch {
	case err == nil:
		done(linear.MutexResult{OK: true, Token: token})
		return true
	case errors.Is(err, dlock.ErrNotAcquired):
		done(linear.MutexResult{})
	default:
		done(linear.MutexResult{Unknown: true})
	}
	return false
}

func recordUnlock(ctx context.Context, h *linear.History, client int, owner string, m mutexCalls) {
	done := h.Call(client, linear.MutexOp{Release: true, Owner: owner})
	err := m.unlock(ctx)
	switch {
	case err == nil:
		done(linear.MutexResult{OK: true})
	case errors.Is(err, dlock.ErrNotHeld):
		done(linear.MutexResult{})
	default:
		done(linear.MutexResult{Unknown: true})
	}
}

// dlockCalls are a Mutex's TryLock and the Unlock of its last lease.
func dlockCalls(mu *dlock.Mutex) mutexCalls {
	var lease *dlock.Lease
	return mutexCalls{
		tryLock: func(ctx context.Context) (uint64, error) {
			l, err := mu.TryLock(ctx)
			if err != nil {
				return 0, err
			}
			lease = l
			return l.Token(), nil
		},
		unlock: func(ctx context.Context) error { return lease.Unlock(ctx) },
	}
}

// brokenCalls are a lock as it is often written, wrongly: its unlock
// deletes the key without checking whose it is.
func brokenCalls(rdb redis.UniversalClient, name, owner string) mutexCalls {
	key := "broken:{" + name + "}"
	return mutexCalls{
		tryLock: func(ctx context.Context) (uint64, error) {
			ok, err := rdb.SetNX(ctx, key, owner, time.Minute).Result()
			if err != nil {
				return 0, err
			}
			if !ok {
				return 0, dlock.ErrNotAcquired
			}
			n, err := rdb.Incr(ctx, key+":fence").Uint64()
			return n, err
		},
		unlock: func(ctx context.Context) error {
			n, err := rdb.Del(ctx, key).Result()
			if err == nil && n == 0 {
				err = dlock.ErrNotHeld
			}
			return err
		},
	}
}

func TestMutex_HistoriesAreLinearizable(t *testing.T) {
	const clients, rounds = 6, 40
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		var h linear.History
		runWorkers(t, clients, func(ctx context.Context, w int) error {
			calls := dlockCalls(newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute)).Mutex(name))
			owner := fmt.Sprint("client-", w)
			for round := range rounds {
				if !recordTry(ctx, &h, w, owner, calls) {
					continue
				}
				recordUnlock(ctx, &h, w, owner, calls)
				if round%4 == w%4 { // now and then a second Unlock: refused, and harmless
					recordUnlock(ctx, &h, w, owner, calls)
				}
			}
			return nil
		})
		if got := h.Linearizable(linear.FencedMutexModel, time.Minute); got != porcupine.Ok {
			t.Fatalf("%d operations: %v; want linearizable against the fenced mutex", h.Len(), got)
		}
	})
}

// The checker proves itself on real Redis: the same sequence of calls is
// linearizable for dlock and not for a lock whose unlock does not check
// the owner.
func TestFencedMutexModel_FlagsALockThatReleasesAnothersHold(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	rdb := backends[0].newRedis(t)
	name := lockName(t)
	c := newClient(t, rdb, dlock.WithTTL(time.Minute))
	for _, tc := range []struct {
		impl  string
		calls func(owner string) mutexCalls
		want  porcupine.CheckResult
	}{
		{"dlock", func(string) mutexCalls { return dlockCalls(c.Mutex(name)) }, porcupine.Ok},
		{"DEL without a check", func(owner string) mutexCalls { return brokenCalls(rdb, name, owner) }, porcupine.Illegal},
	} {
		var h linear.History
		a, b, cc := tc.calls("a"), tc.calls("b"), tc.calls("c")
		recordTry(ctx, &h, 0, "a", a)
		recordUnlock(ctx, &h, 0, "a", a)
		recordTry(ctx, &h, 1, "b", b)
		recordUnlock(ctx, &h, 0, "a", a) // a's second unlock, while b holds
		cHolds := recordTry(ctx, &h, 2, "c", cc)
		recordUnlock(ctx, &h, 1, "b", b)
		if cHolds {
			recordUnlock(ctx, &h, 2, "c", cc)
		}
		if got := h.Linearizable(linear.FencedMutexModel, time.Minute); got != tc.want {
			t.Errorf("%s: %v; want %v", tc.impl, got, tc.want)
		}
	}
}
