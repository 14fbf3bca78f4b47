package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
)

func holderInfo(user string) admin.HolderInfo {
	return admin.HolderInfo{Hostname: "web-1", PID: 4242, Program: "billing", User: user}
}

// describedInfo is what Describe says of the holders of name: the info of
// each, "" for one without.
func describedInfo(t *testing.T, ctx context.Context, c *dlock.Client, name string) []string {
	t.Helper()
	info, err := c.Describe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, h := range info.Holders {
		if h.Info == nil {
			users = append(users, "")
		} else {
			users = append(users, h.Info.User)
		}
	}
	return users
}

// exclusive are the lock types whose holder info goes with a lock key.
var exclusive = []struct {
	name string
	lock func(c *dlock.Client, name string) func(context.Context) (*dlock.Lease, error)
}{
	{"Mutex", func(c *dlock.Client, name string) func(context.Context) (*dlock.Lease, error) {
		return c.Mutex(name).Lock
	}},
	{"FairMutex", func(c *dlock.Client, name string) func(context.Context) (*dlock.Lease, error) {
		return c.FairMutex(name).Lock
	}},
}

// A Mutex's (FairMutex's) holder info is Describe's while the lock is held,
// renewed with the hold past its first TTL, handed over with the lock to
// the waiter that gets it, and gone with the release.
func TestHolderInfo_MutexIsDescribedRenewedHandedOverAndReleased(t *testing.T) {
	for _, typ := range exclusive {
		t.Run(typ.name, func(t *testing.T) { testHolderInfoOfExclusive(t, typ.lock) })
	}
}

func testHolderInfoOfExclusive(t *testing.T, lock func(c *dlock.Client, name string) func(context.Context) (*dlock.Lease, error)) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, 30*time.Second)
		rdb := b.newRedis(t)
		ttl := 300 * time.Millisecond
		name := lockName(t)
		first := newClient(t, rdb, dlock.WithTTL(ttl), dlock.WithHolderInfo(holderInfo("first")))
		second := newClient(t, b.newRedis(t), dlock.WithTTL(ttl), dlock.WithHolderInfo(holderInfo("second")))
		lease, err := lock(first, name)(ctx)
		if err != nil {
			t.Fatal(err)
		}
		info, err := first.Describe(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Holders) != 1 || info.Holders[0].Info == nil || *info.Holders[0].Info != holderInfo("first") {
			t.Fatalf("Describe: %+v, want the holder's info %+v", info.Holders, holderInfo("first"))
		}
		deadline := lease.Deadline()
		eventually(t, ctx, "renewals carrying the lease past its first TTL", func() bool {
			return time.Now().After(deadline.Add(ttl))
		})
		if got := describedInfo(t, ctx, first, name); len(got) != 1 || got[0] != "first" {
			t.Fatalf("after renewals: %q, want [first]", got)
		}
		waiting := make(chan *dlock.Lease, 1)
		go func() {
			l, err := lock(second, name)(ctx)
			if err != nil {
				t.Error(err)
			}
			waiting <- l
		}()
		eventually(t, ctx, "the second Lock waiting", func() bool {
			info, err := first.Describe(ctx, name)
			queued := rdb.Exists(ctx, lockKey(name)+":queue").Val() == 1 // a FairMutex's waiters
			return err == nil && (info.WritersWaiting == 1 || queued)
		})
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if l := <-waiting; l == nil {
			t.FailNow()
		}
		if got := describedInfo(t, ctx, first, name); len(got) != 1 || got[0] != "second" {
			t.Fatalf("after the hand-over: %q, want [second]", got)
		}
		if _, err := first.ForceUnlock(ctx, name); err != nil {
			t.Fatal(err)
		}
		if got := keysOn(t, ctx, rdb, "*{"+name+"}:holder*"); len(got) != 0 {
			t.Fatalf("holder info left after the lock was removed: %v", got)
		}
	})
}

// Unlock removes the info with the hold; a lease that runs out takes its
// info with it.
func TestHolderInfo_MutexGoesWithTheHold(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb, dlock.WithHolderInfo(holderInfo("u")))
	name := lockName(t)
	lease, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, lockKey(name)+":holder").Val(); n != 0 {
		t.Fatal("holder info left after Unlock")
	}
	fixed, err := c.Mutex(name, dlock.WithLeaseTime(200*time.Millisecond)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Absolute expiries, so that the moment each is read does not count;
	// the script sets the info after the lock, and Redis's clock may have
	// moved on a millisecond in between (7.0 does not freeze it in a
	// script), which the two PTTLs of this test once caught (200 ms
	// against 199).
	lockAt, _ := rdb.Do(ctx, "pexpiretime", lockKey(name)).Int64()
	infoAt, _ := rdb.Do(ctx, "pexpiretime", lockKey(name)+":holder").Int64()
	if infoAt <= 0 || infoAt > lockAt+1 {
		t.Fatalf("holder info expires at %d ms, want with the hold, at %d", infoAt, lockAt)
	}
	<-fixed.Done()
	eventually(t, ctx, "the info expiring with the hold", func() bool {
		return rdb.Exists(ctx, lockKey(name)+":holder").Val() == 0
	})
	// A holder without info shows none, whatever an earlier holder had.
	plain, err := newClient(t, rdb).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Unlock(ctx)
	if got := describedInfo(t, ctx, c, name); len(got) != 1 || got[0] != "" {
		t.Fatalf("a holder without info: %q", got)
	}
}

// Read-write and reentrant locks keep each owner's info per side, as long
// as that owner holds that side.
func TestHolderInfo_RWMutexAndReentrantPerOwner(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	rdb := backends[0].newRedis(t)
	name := lockName(t)
	writer := newClient(t, rdb, dlock.WithHolderInfo(holderInfo("writer")))
	w, err := writer.RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := describedInfo(t, ctx, writer, name); len(got) != 1 || got[0] != "writer" {
		t.Fatalf("writer: %q", got)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r1, err := newClient(t, rdb, dlock.WithHolderInfo(holderInfo("reader1"))).RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := newClient(t, rdb).RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := describedInfo(t, ctx, writer, name)
	if len(got) != 2 || !(got[0] == "reader1" && got[1] == "" || got[0] == "" && got[1] == "reader1") {
		t.Fatalf("readers: %q, want reader1 and one without", got)
	}
	_ = r1.Unlock(ctx)
	_ = r2.Unlock(ctx)

	re, err := newClient(t, rdb, dlock.WithHolderInfo(holderInfo("reentrant"))).ReentrantMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := describedInfo(t, ctx, writer, name); len(got) != 1 || got[0] != "reentrant" {
		t.Fatalf("reentrant: %q", got)
	}
	_ = re.Unlock(ctx)
	if n := rdb.Exists(ctx, lockKey(name)).Val(); n != 0 {
		t.Fatal("state left after the last release")
	}
}

// Info too large or not UTF-8 is refused before anything is sent.
func TestHolderInfo_BadInfoIsInvalidBeforeAnyCommand(t *testing.T) {
	counter := &commandCounter{}
	rdb := redis.NewClient(&redis.Options{Addr: sharedStandalone().Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(counter)
	ctx := ctxFor(t, 10*time.Second)
	for what, info := range map[string]admin.HolderInfo{
		"too large":              {User: strings.Repeat("x", admin.MaxHolderInfo+1)},
		"too large once encoded": {User: strings.Repeat("\x01", admin.MaxHolderInfo/2)},
		"not UTF-8":              {Program: "bad\xff"},
		"negative pid":           {PID: -1},
	} {
		if _, err := dlock.New(rdb, dlock.WithHolderInfo(info)); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s, New: %v, want ErrInvalid", what, err)
		}
		c, opt := newClient(t, rdb), dlock.WithHolderInfo(info)
		for op, call := range map[string]func() error{
			"Mutex":          func() error { _, err := c.Mutex(lockName(t), opt).TryLock(ctx); return err },
			"RWMutex":        func() error { _, err := c.RWMutex(lockName(t), opt).RLock(ctx); return err },
			"ReentrantMutex": func() error { _, err := c.ReentrantMutex(lockName(t), opt).Lock(ctx); return err },
		} {
			if err := call(); !errors.Is(err, dlock.ErrInvalid) {
				t.Errorf("%s, %s: %v, want ErrInvalid", what, op, err)
			}
		}
	}
	if n := counter.commands.Load(); n != 0 {
		t.Fatalf("%d commands sent for bad holder info", n)
	}
}

// The info goes in the acquire's own script: a Mutex's lock and unlock take
// two round trips with it, as without.
func TestHolderInfo_CostsTheMutexNoRoundTrip(t *testing.T) {
	counter := &commandCounter{}
	rdb := redis.NewClient(&redis.Options{Addr: sharedStandalone().Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := ctxFor(t, 10*time.Second)
	c := newClient(t, rdb, dlock.WithHolderInfo(holderInfo("u")))
	warm, err := c.Mutex(lockName(t)).Lock(ctx) // scripts loaded
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Unlock(ctx)
	rdb.AddHook(counter)
	lease, err := c.Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := counter.commands.Load(); n != 2 {
		t.Fatalf("%d commands for lock and unlock with holder info, want 2", n)
	}
}

// ForceUnlock writes its mark only where nothing foreign is.
func TestForceUnlock_LeavesAForeignMarkKey(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	rdb := backends[0].newRedis(t)
	name := lockName(t)
	lease, err := newClient(t, rdb).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(ctx)
	rdb.Set(ctx, lockKey(name)+":forced", "my-precious-data", 0)
	if _, err := newClient(t, rdb).ForceUnlock(ctx, name); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("ForceUnlock: %v, want ErrWrongType", err)
	}
	if v := rdb.Get(ctx, lockKey(name)+":forced").Val(); v != "my-precious-data" {
		t.Fatalf("the foreign value is now %q", v)
	}
}

// A Semaphore keeps each permit's holder info with the permit: Describe
// counts the permits held with each info (those without one together),
// and a permit given back takes its info with it.
func TestHolderInfo_SemaphorePerPermit(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	rdb := backends[0].newRedis(t)
	name := lockName(t)
	withInfo := newClient(t, rdb, dlock.WithHolderInfo(holderInfo("a")))
	a1, err := withInfo.Semaphore(name, 3).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := withInfo.Semaphore(name, 3).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := newClient(t, rdb).Semaphore(name, 3).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Unlock(ctx)
	info, err := withInfo.Describe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, h := range info.Holders {
		user := "(none)"
		if h.Info != nil {
			user = h.Info.User
		}
		counts[user] += h.Holds
	}
	if len(info.Holders) != 2 || counts["a"] != 2 || counts["(none)"] != 1 {
		t.Fatalf("Semaphore holders %+v; want 2 permits with info a, 1 without", info.Holders)
	}
	_ = a1.Unlock(ctx)
	_ = a2.Unlock(ctx)
	info, err = withInfo.Describe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holders) != 1 || info.Holders[0].Info != nil || info.Holders[0].Holds != 1 {
		t.Fatalf("after the releases: %+v; want one permit without info", info.Holders)
	}
	fields := rdb.HKeys(ctx, lockKey(name)+":tokens").Val()
	if len(fields) != 1 {
		t.Fatalf("tokens hash fields after the releases: %d, want the one holder's token", len(fields))
	}
}

// A value at a Mutex's or FairMutex's holder info key that looks like
// dlock's (an owner token, then JSON) but has no TTL is not dlock's: every
// script calls it foreign (Describe fails with ErrWrongType), and a
// release, which removes the holder info of the hold it frees, leaves it.
func TestHolderInfo_ReleaseLeavesAForeignHolderKeyWithoutTTL(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb)
	const foreign = `00000000000000000000000000000000{"mine":"keep me"}`
	for _, kind := range []string{"Mutex", "FairMutex"} {
		t.Run(kind, func(t *testing.T) {
			name := lockName(t)
			key := lockKey(name) + ":holder"
			rdb.Set(ctx, key, foreign, 0)
			if _, err := c.Describe(ctx, name); !errors.Is(err, dlock.ErrWrongType) {
				t.Fatalf("Describe: %v, want ErrWrongType", err)
			}
			var lease *dlock.Lease
			var err error
			if kind == "Mutex" {
				lease, err = c.Mutex(name).Lock(ctx)
			} else {
				lease, err = c.FairMutex(name).Lock(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if v, err := rdb.Get(ctx, key).Result(); v != foreign {
				t.Fatalf("after a release the foreign value is %q (%v)", v, err)
			}
		})
	}
}
