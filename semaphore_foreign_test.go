package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/scripts"
)

// The keys of a Semaphore, after its name's key, under which another
// program may write while the semaphore is in use.
var semaphoreKeys = []string{"", ":tokens", ":permits", ":waiters", ":fence"}

// semaphoreForeignCases calls f with each foreign value (foreignValues),
// with no TTL and with one, under each of a Semaphore's keys, but those
// that are what dlock writes there: a sorted set with a TTL under the
// holders or the waiters, a hash with a TTL under the tokens.
func semaphoreForeignCases(f func(suffix, kind string, ttl time.Duration)) {
	for _, suffix := range semaphoreKeys {
		for kind := range foreignValues {
			for _, ttl := range []time.Duration{0, time.Hour} {
				if ttl > 0 && (strings.Contains(kind, "zset") && (suffix == "" || suffix == ":waiters") ||
					kind == "hash" && suffix == ":tokens") {
					continue
				}
				f(suffix, kind, ttl)
			}
		}
	}
}

// plantForeign replaces key with a foreign value of kind, with ttl (0:
// none), and returns its dump.
func plantForeign(t *testing.T, ctx context.Context, rdb redis.UniversalClient, key, kind string, ttl time.Duration) string {
	t.Helper()
	rdb.Del(ctx, key)
	if err := foreignValues[kind](ctx, rdb, key); err != nil {
		t.Fatal(err)
	}
	if ttl > 0 {
		rdb.Expire(ctx, key, ttl)
	}
	return rdb.Dump(ctx, key).Val()
}

// leftForeign fails the test unless key still holds dump, with a TTL when
// it had one (ttl).
func leftForeign(t *testing.T, ctx context.Context, rdb redis.UniversalClient, what, key, dump string, ttl time.Duration) {
	t.Helper()
	if rdb.Dump(ctx, key).Val() != dump {
		t.Errorf("%s: the foreign value changed", what)
	}
	if pttl := rdb.PTTL(ctx, key).Val(); (ttl == 0) != (pttl == -1) {
		t.Errorf("%s: its PTTL is now %v", what, pttl)
	}
}

// An acquire of a Semaphore another holds a permit of (so not quiet: no
// TYPE probe comes first) fails with ErrWrongType naming the key, and
// changes no key of the semaphore, when a key of it holds what dlock did
// not write: the PTTLs, the MGET and the command that touches each key
// must tell.
func TestSemaphore_AnAcquireBesideAHolderFindingAForeignKeyFailsAndChangesNothing(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb, dlock.WithTTL(time.Minute))
	other := newClient(t, rdb, dlock.WithTTL(time.Minute))
	semaphoreForeignCases(func(suffix, kind string, ttl time.Duration) {
		name := lockName(t)
		key := lockKey(name) + suffix
		held, err := c.Semaphore(name, 2).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		dump := plantForeign(t, ctx, rdb, key, kind, ttl)
		dumps := func() map[string]string {
			d := map[string]string{}
			for _, k := range keysOn(t, ctx, rdb, "*{"+name+"}*") {
				d[k] = fmt.Sprintf("%q ttl:%v", rdb.Dump(ctx, k).Val(), rdb.PTTL(ctx, k).Val() > 0)
			}
			return d
		}
		for op, acquire := range map[string]func(context.Context) (*dlock.Lease, error){
			"TryAcquire": other.Semaphore(name, 2).TryAcquire,
			"Acquire":    other.Semaphore(name, 2).Acquire,
		} {
			what := fmt.Sprintf("%s beside a holder with a %s (TTL %v) under %s", op, kind, ttl, key)
			before := dumps()
			opCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			l, err := acquire(opCtx)
			cancel()
			if err == nil && l != nil {
				_ = l.Unlock(ctx)
			}
			if !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(err.Error(), key) {
				t.Errorf("%s: %v; want ErrWrongType naming the key", what, err)
			}
			if after := dumps(); !maps.Equal(before, after) {
				t.Errorf("%s changed keys: %v", what, keysDiff(before, after))
			}
			leftForeign(t, ctx, rdb, what, key, dump, ttl)
		}
		rdb.Del(ctx, key)
		_ = held.Unlock(ctx)
		_, _ = c.ForceUnlock(ctx, name)
	})
}

// A waiter for a Semaphore whose key another program replaced while it
// waits fails with ErrWrongType naming the key at its next attempt, and
// leaves the value as it was: its attempts, refused and registering
// behind the holder, or granted once the holder let go (freed), run no
// TYPE probe first.
func TestSemaphore_AWaiterFindingAForeignKeyFailsAndLeavesIt(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb, dlock.WithTTL(time.Minute))
	waiter := newClient(t, rdb, dlock.WithTTL(time.Minute), dlock.WithWaiterRefresh(20*time.Millisecond))
	attempts := countAttemptsOf(waiter, scripts.SemAcquire)
	semaphoreForeignCases(func(suffix, kind string, ttl time.Duration) {
		for _, freed := range []bool{false, true} {
			if freed && suffix != ":waiters" && suffix != ":tokens" {
				continue // a release that finds these not dlock's frees nothing, or wakes nobody
			}
			name := lockName(t)
			key := lockKey(name) + suffix
			what := fmt.Sprintf("a waiter (freed: %v) with a %s (TTL %v) under %s", freed, kind, ttl, key)
			held, err := c.Semaphore(name, 1).Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			registered := attempts.registeredReach(attempts.registered.Load() + 1)
			done := make(chan error, 1)
			go func() {
				waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				l, err := waiter.Semaphore(name, 1).Acquire(waitCtx)
				if err == nil {
					_ = l.Unlock(ctx)
				}
				done <- err
			}()
			<-registered
			dump := plantForeign(t, ctx, rdb, key, kind, ttl)
			if freed {
				_ = held.Unlock(ctx)
			}
			if err := <-done; !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(err.Error(), key) {
				t.Errorf("%s: the waiter's Acquire: %v; want ErrWrongType naming the key", what, err)
			}
			leftForeign(t, ctx, rdb, what, key, dump, ttl)
			rdb.Del(ctx, key)
			_ = held.Unlock(ctx)
			_, _ = c.ForceUnlock(ctx, name)
		}
	})
}
