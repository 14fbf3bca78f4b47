package dlock_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/serverstats"
)

// foreignValues write, under a key, a value of each Redis type that dlock
// did not write: what another program may keep under a name that happens
// to be a lock's.
var foreignValues = map[string]func(ctx context.Context, rdb redis.UniversalClient, key string) error{
	"string": func(ctx context.Context, rdb redis.UniversalClient, k string) error {
		return rdb.Set(ctx, k, "my-precious-data", 0).Err()
	},
	"list": func(ctx context.Context, rdb redis.UniversalClient, k string) error {
		return rdb.RPush(ctx, k, "a", "b").Err()
	},
	"set": func(ctx context.Context, rdb redis.UniversalClient, k string) error {
		return rdb.SAdd(ctx, k, "a").Err()
	},
	"zset": func(ctx context.Context, rdb redis.UniversalClient, k string) error {
		// Scored past any clock, as a live waiter's registration would be.
		return rdb.ZAdd(ctx, k, redis.Z{Score: 1 << 50, Member: "alice"}, redis.Z{Score: 1 << 51, Member: "bob"}).Err()
	},
	"stale zset": func(ctx context.Context, rdb redis.UniversalClient, k string) error {
		// Scored in the past, as an expired hold or registration would be.
		return rdb.ZAdd(ctx, k, redis.Z{Score: 1, Member: "alice"}, redis.Z{Score: 2, Member: "bob"}).Err()
	},
	"hash": func(ctx context.Context, rdb redis.UniversalClient, k string) error {
		return rdb.HSet(ctx, k, "foo", "bar").Err()
	},
	"stream": func(ctx context.Context, rdb redis.UniversalClient, k string) error {
		return rdb.XAdd(ctx, &redis.XAddArgs{Stream: k, Values: []string{"foo", "bar"}}).Err()
	},
}

// foreignCell says whether a foreign value of kind under a key ending in
// suffix is one this test asks dlock to recognise. A string under the
// fencing counter is the corrupted counter's case, tested with fencing.
func foreignCell(suffix, kind string) bool {
	return !(suffix == ":fence" && kind == "string")
}

// Every lock type recognises its own keys: a value dlock did not write under
// any key of the lock is refused with ErrWrongType by every acquisition, by
// Describe and by ForceUnlock, each of which leaves every key byte for byte
// as it was and creates none.
func TestForeignKeys_AreRefusedAndLeftByteForByte(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb, dlock.WithTTL(time.Minute))
	withInfo := newClient(t, rdb, dlock.WithTTL(time.Minute), dlock.WithHolderInfo(admin.HolderInfo{Program: "p"}))
	rwKeys := []string{"", ":holds", ":waiters", ":rwaiters", ":rpass", ":fence"}
	mutexKeys := []string{"", ":fence", ":waiters"}
	type acquire func(ctx context.Context, names []string) (*dlock.Lease, error)
	types := []struct {
		name    string
		keys    []string // after the lock's key
		names   int      // lock names it takes; the foreign key is under the first
		acquire []acquire
		// The keys beside the lock that a release or an abandon may look
		// at, which nothing holds while one hold and no waiter does; a
		// waiting call registers under the first. take and wait, when
		// given, take the lock and wait for it, else acquire[0] and [1].
		beside     []string
		take, wait acquire
		// The keys of the lock that record its holds ("" the lock's own),
		// overwritten here by another program while held: TTL, Extend
		// and the release find the hold gone, or do not recognise the
		// key, and change nothing of it, its expiry included.
		held []string
	}{
		{"Mutex", mutexKeys, 1, []acquire{
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return c.Mutex(n[0]).TryLock(ctx) },
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return c.Mutex(n[0]).Lock(ctx) },
		}, []string{":waiters"}, nil, nil, []string{""}},
		{"Mutex with holder info", []string{":holder"}, 1, []acquire{
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return withInfo.Mutex(n[0]).TryLock(ctx) },
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return withInfo.Mutex(n[0]).Lock(ctx) },
		}, []string{":waiters", ":holder"}, nil, nil, nil},
		{"FairMutex with holder info", []string{":holder"}, 1, []acquire{
			func(ctx context.Context, n []string) (*dlock.Lease, error) {
				return withInfo.FairMutex(n[0]).TryLock(ctx)
			},
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return withInfo.FairMutex(n[0]).Lock(ctx) },
		}, []string{":queue", ":holder"}, nil, nil, nil},
		{"ReentrantMutex", rwKeys, 1, []acquire{
			func(ctx context.Context, n []string) (*dlock.Lease, error) {
				return c.ReentrantMutex(n[0]).TryLock(ctx)
			},
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return c.ReentrantMutex(n[0]).Lock(ctx) },
			func(ctx context.Context, n []string) (*dlock.Lease, error) { // reports no holder
				_, err := c.ReentrantMutex(n[0]).Inspect(ctx)
				return nil, err
			},
		}, []string{":waiters", ":rwaiters", ":rpass"}, nil, nil, []string{":holds", ""}},
		{"RWMutex", rwKeys, 1, []acquire{
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return c.RWMutex(n[0]).TryLock(ctx) },
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return c.RWMutex(n[0]).TryRLock(ctx) },
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return c.RWMutex(n[0]).Lock(ctx) },
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return c.RWMutex(n[0]).RLock(ctx) },
			func(ctx context.Context, n []string) (*dlock.Lease, error) { // reports no holder
				_, err := c.RWMutex(n[0]).Inspect(ctx)
				return nil, err
			},
		}, []string{":waiters", ":rwaiters", ":rpass"},
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return c.RWMutex(n[0]).TryLock(ctx) },
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return c.RWMutex(n[0]).Lock(ctx) },
			[]string{":holds", ""},
		},
		{"FairMutex", []string{"", ":fence", ":queue", ":waiters"}, 1, []acquire{
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return c.FairMutex(n[0]).TryLock(ctx) },
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return c.FairMutex(n[0]).Lock(ctx) },
		}, []string{":queue", ":waiters"}, nil, nil, []string{""}},
		{"Semaphore", []string{"", ":tokens", ":permits", ":waiters", ":fence"}, 1, []acquire{
			func(ctx context.Context, n []string) (*dlock.Lease, error) {
				return c.Semaphore(n[0], 2).TryAcquire(ctx)
			},
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return c.Semaphore(n[0], 2).Acquire(ctx) },
			func(ctx context.Context, n []string) (*dlock.Lease, error) { // writes the permits too
				return nil, c.Semaphore(n[0], 2).SetPermits(ctx, 3)
			},
		}, []string{":waiters"},
			func(ctx context.Context, n []string) (*dlock.Lease, error) {
				return c.Semaphore(n[0], 1).TryAcquire(ctx)
			},
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return c.Semaphore(n[0], 1).Acquire(ctx) },
			[]string{":tokens", ""},
		},
		{"MultiLock", mutexKeys, 2, []acquire{
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return c.MultiLock(n).TryLock(ctx) },
			func(ctx context.Context, n []string) (*dlock.Lease, error) { return c.MultiLock(n).Lock(ctx) },
		}, []string{":waiters"}, nil, nil, []string{""}},
		{"Election", []string{"", ":fence", ":waiters", ":leader"}, 1, []acquire{
			func(ctx context.Context, n []string) (*dlock.Lease, error) {
				return c.Election(n[0]).Campaign(ctx, "v")
			},
		}, []string{":waiters", ":leader"}, nil,
			func(ctx context.Context, n []string) (*dlock.Lease, error) {
				return c.Election(n[0]).Campaign(ctx, "v")
			},
			[]string{""},
		},
	}
	// check runs op on names with a foreign value under key: it must fail
	// with ErrWrongType naming the key, and change nothing.
	check := func(what, key string, names []string, op func(ctx context.Context) error) {
		t.Helper()
		before := dumpKeys(t, ctx, rdb, names)
		opCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := op(opCtx)
		cancel()
		if !errors.Is(err, dlock.ErrWrongType) {
			t.Errorf("%s: %v; want ErrWrongType", what, err)
		} else if !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v; want the key named", what, err)
		}
		if after := dumpKeys(t, ctx, rdb, names); !maps.Equal(before, after) {
			t.Errorf("%s changed keys: %v", what, keysDiff(before, after))
		}
	}
	for _, typ := range types {
		for _, suffix := range typ.keys {
			for kind, write := range foreignValues {
				if !foreignCell(suffix, kind) {
					continue
				}
				names := make([]string, typ.names)
				for i := range names {
					names[i] = lockName(t)
				}
				key := lockKey(names[0]) + suffix
				if err := write(ctx, rdb, key); err != nil {
					t.Fatal(err)
				}
				for i, acquire := range typ.acquire {
					check(typ.name+" acquisition #"+string(rune('1'+i))+" with a "+kind+" under "+key, key, names,
						func(ctx context.Context) error {
							l, err := acquire(ctx, names)
							if err == nil && l != nil {
								_ = l.Unlock(context.WithoutCancel(ctx))
							}
							return err
						})
				}
			}
		}
	}
	// Releases and abandons: a foreign value under a key beside a lock held
	// counts as nobody waiting. The release succeeds and frees the lock, and
	// the value is left byte for byte.
	plant := func(key, kind string) string {
		t.Helper()
		if err := rdb.Del(ctx, key).Err(); err != nil { // a Leader's record goes
			t.Fatal(err)
		}
		if err := foreignValues[kind](ctx, rdb, key); err != nil {
			t.Fatal(err)
		}
		return rdb.Dump(ctx, key).Val()
	}
	// left fails the test unless key still holds dump; then removes it and
	// checks that nothing of names is held.
	left := func(what, key, dump string, names []string) {
		t.Helper()
		if after := rdb.Dump(ctx, key).Val(); after != dump {
			t.Errorf("%s changed the foreign value", what)
		}
		if err := rdb.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if held, err := c.ForceUnlock(ctx, name); err != nil || held {
				t.Errorf("%s: %s still held (%v, %v)", what, name, held, err)
			}
		}
	}
	for _, typ := range types {
		take, wait := typ.take, typ.wait
		if take == nil {
			take = typ.acquire[0]
		}
		if wait == nil {
			wait = typ.acquire[1]
		}
		for _, suffix := range typ.beside {
			for kind := range foreignValues {
				names := make([]string, typ.names)
				for i := range names {
					names[i] = lockName(t)
				}
				key := lockKey(names[0]) + suffix
				what := typ.name + " Unlock with a " + kind + " under " + key
				lease, err := take(ctx, names)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				dump := plant(key, kind)
				if err := lease.Unlock(ctx); err != nil {
					t.Errorf("%s: %v", what, err)
				}
				left(what, key, dump, names)
			}
		}
		for _, suffix := range typ.held {
			for kind := range foreignValues {
				names := make([]string, typ.names)
				for i := range names {
					names[i] = lockName(t)
				}
				key := lockKey(names[0]) + suffix
				what := typ.name + " Unlock with a " + kind + " under " + key
				lease, err := take(ctx, names)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				dump := plant(key, kind)
				// What the renewer does, and the caller may: neither may
				// give the value an expiry (DUMP does not show one).
				_, _ = lease.TTL(ctx)
				_ = lease.Extend(ctx, time.Minute)
				err = lease.Unlock(ctx)
				if err != nil && !errors.Is(err, dlock.ErrNotHeld) && !errors.Is(err, dlock.ErrWrongType) {
					t.Errorf("%s: %v", what, err)
				}
				if after := rdb.Dump(ctx, key).Val(); after != dump {
					t.Errorf("%s changed the foreign value", what)
				}
				if pttl := rdb.PTTL(ctx, key).Val(); pttl != -1 {
					t.Errorf("%s, after TTL and Extend: the foreign value expires in %v", what, pttl)
				}
			}
		}
		// A waiting call that gives up once the lock is free (its hold
		// expired, say) passes the lock on: to nobody, as its waiters are
		// not dlock's.
		for kind := range foreignValues {
			names := make([]string, typ.names)
			for i := range names {
				names[i] = lockName(t)
			}
			what := typ.name + " abandon with a " + kind + " under its waiters"
			if _, err := take(ctx, names); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			waitCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				l, err := wait(waitCtx, names)
				if err == nil {
					_ = l.Unlock(ctx)
				}
				done <- err
			}()
			var key string
			eventually(t, ctx, what+": registration", func() bool {
				for _, name := range names {
					if k := lockKey(name) + typ.beside[0]; rdb.Exists(ctx, k).Val() == 1 {
						key = k
						return true
					}
				}
				return false
			})
			dump := plant(key, kind)
			for _, name := range names { // the holds expire
				for _, k := range keysOn(t, ctx, rdb, "*{"+name+"}*") {
					if k != key && !strings.HasSuffix(k, ":permits") {
						rdb.Del(ctx, k)
					}
				}
			}
			cancel()
			if err := <-done; err == nil {
				t.Errorf("%s: the waiting call took the lock", what)
			}
			left(what, key, dump, names)
		}
	}
	// Describe and ForceUnlock, on any name, with a foreign value under any
	// key of any lock type, a string that is no number under the fencing
	// counter included (ForceUnlock took it for a counter).
	suffixes := map[string]bool{}
	for _, typ := range types {
		for _, s := range typ.keys {
			suffixes[s] = true
		}
	}
	for suffix := range suffixes {
		for kind, write := range foreignValues { // a counter that is no number too
			name := lockName(t)
			key := lockKey(name) + suffix
			if err := write(ctx, rdb, key); err != nil {
				t.Fatal(err)
			}
			check("Describe with a "+kind+" under "+key, key, []string{name}, func(ctx context.Context) error {
				info, err := c.Describe(ctx, name)
				if err == nil {
					t.Logf("Describe with a %s under %s: %+v", kind, key, info)
				}
				return err
			})
			check("ForceUnlock with a "+kind+" under "+key, key, []string{name}, func(ctx context.Context) error {
				_, err := c.ForceUnlock(ctx, name)
				return err
			})
		}
	}
}

// A release that finds its read-write lock's state gone (evicted) does not
// write it again, without dlock's mark or with it: the other holds went
// with the state, and their leases are lost at their next renewal (see
// TestLease_WriteHoldWhoseStateIsDeletedIsReportedLost), never renewed.
func TestForeignKeys_AReleaseDoesNotRewriteAStateThatWentMissing(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	rdb := startServer(t).Client()
	c := newClient(t, rdb, dlock.WithTTL(time.Second))
	name := lockName(t)
	first, err := c.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, lockKey(name)).Err(); err != nil { // the state, evicted
		t.Fatal(err)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if state := rdb.HGetAll(ctx, lockKey(name)).Val(); len(state) != 0 {
		t.Fatalf("the release wrote the state again: %v", state)
	}
	waitDone(t, second.Done(), lossGuard, "loss of the other read hold, its state gone")
	if !errors.Is(second.Err(), dlock.ErrLeaseLost) {
		t.Fatalf("Err of the other read hold: %v, want ErrLeaseLost", second.Err())
	}
	if n := rdb.Exists(ctx, lockKey(name)).Val(); n != 0 {
		t.Fatal("a renewal wrote the state again")
	}
}

// A key whose name reads like a missing library's error is refused as any
// other foreign key, without loading the library again: only an error
// that starts as Redis words a missing function is one.
func TestForeign_ANameLikeAMissingFunctionsErrorLoadsNothing(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	rdb := startServer(t).Client()
	c := newClient(t, rdb)
	if _, err := c.Mutex("warm").TryLock(ctx); err != nil { // the library loaded
		t.Fatal(err)
	}
	name := "x Function not found y"
	if err := rdb.RPush(ctx, lockKey(name), "v").Err(); err != nil {
		t.Fatal(err)
	}
	before, err := serverstats.Calls(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("TryLock on a list: %v; want ErrWrongType", err)
	}
	after, err := serverstats.Calls(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if n := after["function|load"] - before["function|load"]; n != 0 {
		t.Errorf("the library was loaded %d times for a foreign key's error", n)
	}
}

// A Mutex's release that finds a value of another type under its lock key
// (written over the hold by another program) fails with ErrWrongType
// naming the key, as the acquisitions do, and leaves it as it is: not
// ErrNotHeld, as though the lock had simply run out.
func TestForeignKeys_AMutexReleaseOnALockKeyOfAnotherTypeIsErrWrongType(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb, dlock.WithTTL(time.Minute))
	for kind, write := range foreignValues {
		if kind == "string" { // another holder's, for all a release can tell
			continue
		}
		name := lockName(t)
		key := lockKey(name)
		lease, err := c.Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		if err := write(ctx, rdb, key); err != nil {
			t.Fatal(err)
		}
		dump := rdb.Dump(ctx, key).Val()
		if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(err.Error(), key) {
			t.Errorf("Unlock with a %s under the lock key: %v; want ErrWrongType naming %s", kind, err, key)
		}
		if after := rdb.Dump(ctx, key).Val(); after != dump {
			t.Errorf("Unlock with a %s under the lock key changed it", kind)
		}
	}
}
