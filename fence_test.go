package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
)

// fencedType is a lock type as the fencing tests see it: how to take a hold
// under a name, and the names whose counters that hold mints from.
type fencedType struct {
	name  string
	names func(name string) []string
	take  func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error)
}

func oneName(name string) []string { return []string{name} }

// groupOf is the MultiLock group taken under name: two locks in one slot.
func groupOf(name string) []string { return []string{name, name + "+b"} }

// fencedTypes take free names with the waiting calls: on a loaded machine
// a grant of a short TTL may come back too late to be handed over, and is
// given back; a Lock tries again, where a TryLock would fail. A Semaphore
// has two permits.
var fencedTypes = func() []fencedType {
	var types []fencedType
	for _, k := range serverKinds() {
		names, lock := oneName, lockOn(k, 2, groupOf)
		if k.Group {
			names = groupOf
		}
		types = append(types, fencedType{k.Label(), names, func(ctx context.Context, c *dlock.Client, n string) (*dlock.Lease, error) {
			return lock(c, n)(ctx)
		}})
	}
	return types
}()

func fenceKey(name string) string {
	_, fence, _ := dlock.KeysOf(dlock.DefaultPrefix, name)
	return fence
}

// takeAndRelease takes a hold of typ under name, releases it, and returns
// the token it had under each of its names.
func takeAndRelease(t *testing.T, ctx context.Context, c *dlock.Client, typ fencedType, name string) map[string]uint64 {
	t.Helper()
	lease, err := typ.take(ctx, c, name)
	if err != nil {
		t.Fatalf("%s: %v", typ.name, err)
	}
	tokens := lease.Tokens()
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("%s: Unlock: %v", typ.name, err)
	}
	return tokens
}

// expectAbove fails the test unless every token of next is above the same
// name's token in last.
func expectAbove(t *testing.T, what string, last, next map[string]uint64) {
	t.Helper()
	for name, token := range last {
		if next[name] <= token {
			t.Errorf("%s: token %d for %q after %d: fencing went backwards", what, next[name], name, token)
		}
	}
}

// A fenced resource refuses a token below one it has seen: losing the
// counter (evicted, deleted, a failover to a replica that missed the last
// mint) must not send a name's tokens back to 1.
func TestFence_TokensNeverGoBackWhenTheCounterIsDeleted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		rdb := b.newRedis(t)
		c := newClient(t, rdb, dlock.WithTTL(time.Minute))
		for _, typ := range fencedTypes {
			name := lockName(t)
			last := takeAndRelease(t, ctx, c, typ, name)
			next := takeAndRelease(t, ctx, c, typ, name)
			expectAbove(t, typ.name+" (counter kept)", last, next)
			for _, n := range typ.names(name) {
				if err := rdb.Del(ctx, fenceKey(n)).Err(); err != nil {
					t.Fatal(err)
				}
			}
			expectAbove(t, typ.name+" (counter deleted)", next, takeAndRelease(t, ctx, c, typ, name))
		}
	})
}

// The same after the whole database is flushed while nothing is held.
func TestFence_TokensNeverGoBackAfterFlushAll(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	rdb := startServer(t).Client()
	c := newClient(t, rdb, dlock.WithTTL(time.Minute))
	for _, typ := range fencedTypes {
		name := lockName(t)
		takeAndRelease(t, ctx, c, typ, name)
		last := takeAndRelease(t, ctx, c, typ, name)
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		expectAbove(t, typ.name+" (flushed)", last, takeAndRelease(t, ctx, c, typ, name))
	}
}

// A release that hands the lock to a waiter mints its token in the release:
// with the counter gone meanwhile, that token is still above the holder's.
func TestFence_HandOverAfterTheCounterIsDeletedMintsAHigherToken(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	holderRedis, waiterRedis := backends[0].newRedis(t), backends[0].newRedis(t)
	holders, waiters := newClient(t, holderRedis, dlock.WithTTL(time.Minute)), newClient(t, waiterRedis, dlock.WithTTL(time.Minute))
	types := []struct {
		name    string
		acquire *redis.Script
		lock    func(c *dlock.Client, name string) func(context.Context) (*dlock.Lease, error)
	}{
		{"Mutex", scripts.MutexAcquire, func(c *dlock.Client, n string) func(context.Context) (*dlock.Lease, error) {
			return c.Mutex(n).Lock
		}},
		{"FairMutex", scripts.FairAcquire, func(c *dlock.Client, n string) func(context.Context) (*dlock.Lease, error) {
			return c.FairMutex(n).Lock
		}},
	}
	for _, typ := range types {
		name := lockName(t)
		held, err := typ.lock(holders, name)(ctx)
		if err != nil {
			t.Fatal(err)
		}
		registered := countAttemptsOf(waiters, typ.acquire).registeredReach(1)
		waiting := make(chan *dlock.Lease, 1)
		go func() {
			lease, err := typ.lock(waiters, name)(ctx)
			if err != nil {
				t.Errorf("%s waiter: %v", typ.name, err)
			}
			waiting <- lease
		}()
		waitDone(t, registered, 10*time.Second, typ.name+": the waiter registering")
		if err := holderRedis.Del(ctx, fenceKey(name)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		next := <-waiting
		if next == nil {
			continue
		}
		if next.Token() <= held.Token() {
			t.Errorf("%s: handed over with token %d after %d", typ.name, next.Token(), held.Token())
		}
		_ = next.Unlock(ctx)
	}
}

// A Redlock agrees on the highest token among a majority and writes it
// back: with every node's counter lost, tokens still go up.
func TestFence_RedlockTokensNeverGoBackWhenCountersAreLost(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	servers := redistest.StartMasters(t, 3)
	rl := redlockOver(t, servers, dlock.WithTTL(time.Minute))
	name := lockName(t)
	take := func() uint64 {
		lease, err := rl.Mutex(name).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		return lease.Token()
	}
	last := take()
	for _, lose := range []string{"DEL", "FLUSHALL"} {
		for _, srv := range servers {
			var err error
			if lose == "DEL" {
				err = srv.Client().Del(ctx, fenceKey(name)).Err()
			} else {
				err = srv.Client().FlushAll(ctx).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if next := take(); next <= last {
			t.Errorf("after %s on every node: token %d after %d", lose, next, last)
		} else {
			last = next
		}
	}
}

// A fencing counter that is not dlock's (not an integer, or another type
// of key) fails every acquisition with ErrWrongType naming the key, and
// the attempt writes nothing; Describe says the same rather than reporting
// the lock free with token 0.
func TestFence_ForeignCounterIsWrongTypeAndChangesNothing(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb, dlock.WithTTL(time.Minute))
	corruptions := map[string]func(key string) error{
		"a word":          func(key string) error { return rdb.Set(ctx, key, "not-a-number", 0).Err() },
		"a fraction":      func(key string) error { return rdb.Set(ctx, key, "1.5", 0).Err() },
		"too big":         func(key string) error { return rdb.Set(ctx, key, "18446744073709551616", 0).Err() },
		"a list":          func(key string) error { return rdb.RPush(ctx, key, "x").Err() },
		"a hash":          func(key string) error { return rdb.HSet(ctx, key, "f", "1").Err() },
		"a negative word": func(key string) error { return rdb.Set(ctx, key, "-x", 0).Err() },
		"an exponent":     func(key string) error { return rdb.Set(ctx, key, "1e5", 0).Err() }, // a number to Lua's tonumber
		// The last token below 2^53: the next would not be exact in JSON
		// or in Lua, and dlock itself would refuse it as a counter.
		"the last safe token": func(key string) error { return rdb.Set(ctx, key, "9007199254740991", 0).Err() },
	}
	for what, corrupt := range corruptions {
		for _, typ := range fencedTypes {
			name := lockName(t)
			names := typ.names(name)
			bad := fenceKey(names[len(names)-1]) // a MultiLock's last: the first counter must not move either
			if err := corrupt(bad); err != nil {
				t.Fatal(err)
			}
			before := dumpKeys(t, ctx, rdb, names)
			lease, err := typ.take(ctx, c, name)
			if err == nil {
				t.Errorf("%s with %s as its counter: acquired, token %d", typ.name, what, lease.Token())
				_ = lease.Unlock(ctx)
				continue
			}
			if !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(err.Error(), bad) {
				t.Errorf("%s with %s as its counter: %v; want ErrWrongType naming %s", typ.name, what, err, bad)
			}
			if after := dumpKeys(t, ctx, rdb, names); !maps.Equal(before, after) {
				t.Errorf("%s with %s as its counter changed keys: %v", typ.name, what, keysDiff(before, after))
			}
			info, err := c.Describe(ctx, names[len(names)-1])
			if !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(fmt.Sprint(err), bad) {
				t.Errorf("Describe of a %s with %s as its counter: %+v, %v; want ErrWrongType naming %s", typ.name, what, info, err, bad)
			}
			if held, err := c.ForceUnlock(ctx, names[len(names)-1]); !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(fmt.Sprint(err), bad) {
				t.Errorf("ForceUnlock of a %s with %s as its counter: %v, %v; want ErrWrongType naming %s", typ.name, what, held, err, bad)
			}
		}
	}
}

// Every name ever locked leaves nothing behind once its holds and its
// counter's retention have run out: many names, each locked once. (A
// Semaphore's number of permits too: it goes with its last permit.)
func TestFence_CountersExpireAfterTheLastHold(t *testing.T) {
	const names = 100_000
	ttl := dlock.MinTTL
	ctx := ctxFor(t, 5*time.Minute)
	srv := startServer(t)
	rdb := srv.Client()
	if err := scripts.MutexAcquire.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	const batch, workers = 1000, 4
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first := w * batch; first < names; first += workers * batch {
				pipe := rdb.Pipeline()
				var cmds []*redis.Cmd
				for i := first; i < min(first+batch, names); i++ {
					name := fmt.Sprintf("leak-%d", i)
					lock, fence, _ := dlock.KeysOf(dlock.DefaultPrefix, name)
					keys := []string{lock, fence, lock + ":void:x", lock + ":waiters"}
					cmds = append(cmds, pipe.EvalSha(ctx, scripts.MutexAcquire.Hash(), keys, "owner", ttl.Milliseconds(), "", 0, ""))
				}
				if _, err := pipe.Exec(ctx); err != nil {
					errs <- err
					return
				}
				for _, cmd := range cmds {
					if res, err := scripts.AcquireReply(cmd); err != nil || len(res) != 2 || res[0] != 1 {
						errs <- fmt.Errorf("a fresh name not acquired: %v, %v", res, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	minted := time.Since(start)
	// The other types, through the library, a few names each.
	c := newClient(t, rdb, dlock.WithTTL(ttl))
	for _, typ := range fencedTypes {
		for range 100 {
			takeAndRelease(t, ctx, c, typ, lockName(t))
		}
	}
	lastMint := time.Now()
	retention := time.Duration(scripts.FenceRetentionTTLs) * ttl
	waitCtx, cancel := context.WithTimeout(ctx, retention+time.Minute)
	defer cancel()
	for time.Since(lastMint) <= retention || rdb.DBSize(ctx).Val() != 0 {
		select {
		case <-waitCtx.Done():
			left, _, _ := rdb.Scan(ctx, 0, "*", 10).Result()
			for _, k := range left {
				t.Logf("left: %s (%s, TTL %v)", k, rdb.Type(ctx, k).Val(), rdb.PTTL(ctx, k).Val())
			}
			t.Fatalf("%d keys left %v after the last mint (retention %v)", rdb.DBSize(ctx).Val(), time.Since(lastMint), retention)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Logf("%d names locked in %v; no key left %v after the last mint (retention %v)",
		names, minted, time.Since(lastMint).Round(time.Millisecond), retention)
}

// A Redlock's nodes count on their own, each floored by its own clock. A
// node whose clock runs ahead gives the quorum its token, which is written
// back to every node; were those copies to expire, the next quorum without
// that node would mint from slower clocks, below it. So a Redlock's
// counters are kept. (Node 0's clock running 30 s ahead is stood in for by
// its counter.)
func TestFence_RedlockTokensNeverGoBackWhenTheNodeAheadIsGone(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	servers := redistest.StartMasters(t, 3)
	name := lockName(t)
	ahead := uint64(time.Now().Add(30 * time.Second).UnixMicro())
	if err := servers[0].Client().Set(ctx, fenceKey(name), ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	take := func(rl *dlock.Redlock) uint64 {
		lease, err := rl.Mutex(name).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		return lease.Token()
	}
	const ttl = time.Second // the shortest for which a node timeout of 200 ms is small
	first := take(redlockOver(t, servers, dlock.WithTTL(ttl), dlock.WithNodeTimeout(200*time.Millisecond)))
	if first <= ahead {
		t.Fatalf("token %d is not above node 0's counter %d", first, ahead)
	}
	for i, srv := range servers {
		if ttl := srv.Client().PTTL(ctx, fenceKey(name)).Val(); ttl != -1 {
			t.Errorf("node %d's counter expires in %v; want it kept", i, ttl)
		}
	}
	// The next hold has a short TTL, the first a long one; the counters of
	// the quorum without node 0 were written back by the first hold.
	servers[0].Kill()
	if next := take(redlockOver(t, servers, dlock.WithTTL(ttl), dlock.WithNodeTimeout(200*time.Millisecond))); next <= first {
		t.Fatalf("token %d after %d: it went back once the node ahead was gone", next, first)
	}
}
