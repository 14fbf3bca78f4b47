package dlock_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/family"
	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
)

// What every lease gives, on the types that share the Mutex's lease: a
// watchdog that keeps the hold past its TTL, Extend, TTL and Context.
func TestFamily_LeasesRenewPastTheirTTL(t *testing.T) {
	const ttl = 300 * time.Millisecond
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		c := newClient(t, b.newRedis(t), dlock.WithTTL(ttl))
		other := newClient(t, b.newRedis(t))
		fair, sem, multi := lockName(t), lockName(t), lockNames(t, 3)
		types := []struct {
			name      string
			lock, try func(context.Context) (*dlock.Lease, error)
		}{
			{"FairMutex", c.FairMutex(fair).Lock, other.FairMutex(fair).TryLock},
			{"Semaphore", c.Semaphore(sem, 1).Acquire, other.Semaphore(sem, 1).TryAcquire},
			{"MultiLock", c.MultiLock(multi).Lock, other.MultiLock(multi[1:]).TryLock},
		}
		for _, typ := range types {
			lease, err := typ.lock(ctx)
			if err != nil {
				t.Fatalf("%s: %v", typ.name, err)
			}
			work := lease.Context(ctx)
			// Several TTLs pass: only renewals keep the hold.
			for deadline := lease.Deadline(); time.Now().Before(deadline.Add(2 * ttl)); {
				select {
				case <-lease.Done():
					t.Fatalf("%s: lease ended while renewed: %v", typ.name, lease.Err())
				case <-time.After(ttl / 2):
				}
			}
			if _, err := typ.try(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("%s: another client got in after %v of a %v TTL: %v", typ.name, 3*ttl, ttl, err)
			}
			if err := lease.Extend(ctx, time.Minute); err != nil {
				t.Fatalf("%s: Extend: %v", typ.name, err)
			}
			if left, err := lease.TTL(ctx); err != nil || left <= ttl {
				t.Fatalf("%s: TTL after Extend to a minute: %v, %v", typ.name, left, err)
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Fatalf("%s: Unlock: %v", typ.name, err)
			}
			waitDone(t, work.Done(), lossGuard, typ.name+": the lease's context ending with the release")
			if l, err := typ.try(ctx); err != nil {
				t.Fatalf("%s: free after Unlock: %v", typ.name, err)
			} else {
				_ = l.Unlock(ctx)
			}
		}
	})
}

// The longest TTL accepted works on every type: no script's arithmetic on
// expiries loses precision or overflows, and Redis takes the PX.
func TestFamily_MaxTTLIsAccepted(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	c := newClient(t, backends[0].newRedis(t), dlock.WithLeaseTime(dlock.MaxTTL))
	for _, k := range serverKinds() {
		typ, names := k.Label(), []string{lockName(t)}
		if k.Group {
			names = lockNames(t, 2)
		}
		lease, err := k.Take(ctx, family.Target{Client: c}, names, true)
		if err != nil {
			t.Fatalf("%s with a lease time of MaxTTL: %v", typ, err)
		}
		if left, err := lease.TTL(ctx); err != nil || left < dlock.MaxTTL-time.Minute {
			t.Errorf("%s: TTL %v (err %v); want about %v", typ, left, err, dlock.MaxTTL)
		}
		if err := lease.Extend(ctx, dlock.MaxTTL); err != nil {
			t.Errorf("%s: Extend(MaxTTL): %v", typ, err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Errorf("%s: Unlock: %v", typ, err)
		}
	}
}

// Two lock types on one name: the second is refused (ErrWrongType, or
// ErrNotAcquired where the types share a layout) and the first's keys are
// left byte for byte as they were.
func TestFamily_AnotherTypeOnAHeldNameIsRefusedAndHarmsNothing(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb, dlock.WithTTL(time.Minute))
	type acquire func(name string) (*dlock.Lease, error)
	types := map[string]acquire{
		"Mutex":          func(n string) (*dlock.Lease, error) { return c.Mutex(n).TryLock(ctx) },
		"ReentrantMutex": func(n string) (*dlock.Lease, error) { return c.ReentrantMutex(n).TryLock(ctx) },
		"RWMutex read":   func(n string) (*dlock.Lease, error) { return c.RWMutex(n).TryRLock(ctx) },
		"FairMutex":      func(n string) (*dlock.Lease, error) { return c.FairMutex(n).TryLock(ctx) },
		"Semaphore":      func(n string) (*dlock.Lease, error) { return c.Semaphore(n, 3).TryAcquire(ctx) },
	}
	dumpAll := func(name string) map[string]string {
		keys, err := rdb.Keys(ctx, "*{"+name+"}*").Result()
		if err != nil {
			t.Fatal(err)
		}
		dump := map[string]string{}
		for _, k := range keys {
			if !strings.Contains(k, ":fence") { // a refused attempt may not mint, but the counter is not a hold
				dump[k] = rdb.Dump(ctx, k).Val()
			}
		}
		return dump
	}
	for first, take := range types {
		for second, try := range types {
			if first == second {
				continue
			}
			name := lockName(t)
			lease, err := take(name)
			if err != nil {
				t.Fatalf("%s: %v", first, err)
			}
			before := dumpAll(name)
			if l, err := try(name); err == nil {
				t.Errorf("%s on a name a %s holds: acquired", second, first)
				_ = l.Unlock(ctx)
			} else if !errors.Is(err, dlock.ErrWrongType) && !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("%s on a name a %s holds: %v; want ErrWrongType or ErrNotAcquired", second, first, err)
			}
			if after := dumpAll(name); !maps.Equal(before, after) {
				t.Errorf("%s on a name a %s holds changed its keys: %v", second, first, keysDiff(before, after))
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Errorf("%s's Unlock after a %s tried its name: %v", first, second, err)
			}
		}
	}
}

// keysDiff names the keys whose dumps differ.
func keysDiff(before, after map[string]string) []string {
	var diff []string
	for k, v := range before {
		if after[k] != v {
			diff = append(diff, k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			diff = append(diff, k+" (new)")
		}
	}
	return diff
}

// Describe and ForceUnlock take every key of every kind's scripts
// (scripts.AnyLockLayout, made from lockTypeScripts' layouts), and a key
// that tells a kind beside an owner token tells one of the family.
func TestFamily_EveryKindsKeysAreThoseOfAnyLock(t *testing.T) {
	for _, k := range family.All {
		s := k.Scripts
		for _, script := range []*redis.Script{s.Acquire, s.Extend, s.Release, s.Abandon} {
			for _, key := range scripts.LayoutOf(script) {
				i := slices.IndexFunc(scripts.AnyLockLayout, func(in scripts.Key) bool { return in.Suffix == key.Suffix })
				if !key.PerCall && i < 0 {
					t.Errorf("%s: Describe and ForceUnlock do not take %s (%q)", k.Kind, key.Lua, key.Suffix)
				}
			}
		}
	}
	for _, key := range scripts.AnyLockLayout {
		if _, ok := family.Of(observe.Kind(key.Tells)); key.Tells != "" && !ok {
			t.Errorf("%s tells %q, which is no kind", key.Lua, key.Tells)
		}
	}
}
