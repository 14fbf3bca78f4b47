package scripts

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
)

// The scripts' contracts, on a real server: what each returns and leaves in
// Redis, including when sent twice or out of order.

const (
	lockKey    = "t:{m}"
	fenceKey   = "t:{m}:fence"
	channel    = "t:{m}:wake"
	waitersKey = "t:{m}:waiters"
	tombstone  = "t:{m}:void:owner-a"
)

func setup(t *testing.T) (context.Context, *redis.Client) {
	rdb := redistest.Start(t).Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, rdb
}

func acquire(t *testing.T, ctx context.Context, rdb *redis.Client, owner string) []int64 {
	t.Helper()
	return acquireAsWaiter(t, ctx, rdb, owner, "")
}

// acquireAsWaiter attempts, registering waiter (when not "") if refused.
func acquireAsWaiter(t *testing.T, ctx context.Context, rdb *redis.Client, owner, waiter string) []int64 {
	t.Helper()
	res, err := MutexAcquire.Run(ctx, rdb, []string{lockKey, fenceKey, "t:{m}:void:" + owner, waitersKey},
		owner, 10000, waiter, 3000).Int64Slice()
	if err != nil {
		t.Fatalf("acquire by %s: %v", owner, err)
	}
	return res
}

func release(t *testing.T, ctx context.Context, rdb *redis.Client, owner string) int64 {
	t.Helper()
	n, err := MutexRelease.Run(ctx, rdb, []string{lockKey, channel, waitersKey}, owner, "PUBLISH").Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func abandon(t *testing.T, ctx context.Context, rdb *redis.Client, owner, waiter string) int64 {
	t.Helper()
	n, err := MutexAbandon.Run(ctx, rdb, []string{lockKey, channel, "t:{m}:void:" + owner, waitersKey},
		owner, "PUBLISH", 10000, waiter).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// listen subscribes to the lock's channel and returns its messages.
func listen(t *testing.T, ctx context.Context, rdb *redis.Client) <-chan *redis.Message {
	t.Helper()
	ps := rdb.Subscribe(ctx, channel)
	t.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(ctx); err != nil { // the confirmation
		t.Fatal(err)
	}
	return ps.Channel()
}

func expectMessage(t *testing.T, messages <-chan *redis.Message, want string) {
	t.Helper()
	select {
	case m := <-messages:
		if m.Payload != want {
			t.Fatalf("published %q, want %q", m.Payload, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("nothing published, want %q", want)
	}
}

func TestMutexAcquire_ResentAcquireCountsOnce(t *testing.T) {
	ctx, rdb := setup(t)
	first := acquire(t, ctx, rdb, "owner-a")
	again := acquire(t, ctx, rdb, "owner-a")
	if first[0] != 1 || again[0] != 1 || again[1] != first[1] {
		t.Fatalf("first %v, resend %v: want both acquired with the same fencing token", first, again)
	}
	if n, _ := rdb.Get(ctx, fenceKey).Int64(); n != 1 {
		t.Fatalf("fencing counter %d after a resent acquire, want 1", n)
	}
}

func TestMutexAcquire_HeldLockReportsTimeLeft(t *testing.T) {
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, "owner-a")
	res := acquire(t, ctx, rdb, "owner-b")
	if res[0] != 0 || res[1] <= 0 || res[1] > 10000 {
		t.Fatalf("acquire of a held lock: %v, want {0, ms left}", res)
	}
}

// An attempt delayed past its own clean-up (a stalled server, a slow network
// path) must not take the lock when it finally arrives.
func TestMutexAcquire_ArrivingAfterItsAbandonIsRefused(t *testing.T) {
	ctx, rdb := setup(t)
	if n := abandon(t, ctx, rdb, "owner-a", ""); n != 0 {
		t.Fatalf("abandon before arrival: %d; want 0", n)
	}
	if res := acquire(t, ctx, rdb, "owner-a"); res[0] != -1 {
		t.Fatalf("late acquire: %v, want {-1, 0}", res)
	}
	if n, _ := rdb.Exists(ctx, lockKey, fenceKey).Result(); n != 0 {
		t.Fatalf("a refused late acquire left %d keys", n)
	}
	if res := acquire(t, ctx, rdb, "owner-b"); res[0] != 1 {
		t.Fatalf("another owner after the refused attempt: %v, want acquired", res)
	}
}

func TestMutexAbandon_ReleasesAnAppliedAttempt(t *testing.T) {
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, "owner-a")
	if n := abandon(t, ctx, rdb, "owner-a", ""); n != 1 {
		t.Fatalf("abandon of an applied attempt: %d; want 1", n)
	}
	if n, _ := rdb.Exists(ctx, lockKey).Result(); n != 0 {
		t.Fatal("abandon left the hold in place")
	}
}

func TestMutexRelease_SentTwiceReleasesOnlyOnce(t *testing.T) {
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, "owner-a")
	if n := release(t, ctx, rdb, "owner-a"); n != 1 {
		t.Fatalf("release: %d, want 1", n)
	}
	acquire(t, ctx, rdb, "owner-b")
	if n := release(t, ctx, rdb, "owner-a"); n != 0 {
		t.Fatalf("resent release: %d, want 0", n)
	}
	if v, _ := rdb.Get(ctx, lockKey).Result(); v != "owner-b" {
		t.Fatalf("resent release touched the next holder: key holds %q", v)
	}
}

func TestMutexExtend_NeverRecreatesAMissingKey(t *testing.T) {
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, "owner-a")
	rdb.Del(ctx, lockKey)
	n, err := MutexExtend.Run(ctx, rdb, []string{lockKey}, "owner-a", 10000).Int64()
	if err != nil || n != 0 {
		t.Fatalf("extend of a deleted lock: %d, %v; want 0", n, err)
	}
	if n, _ := rdb.Exists(ctx, lockKey).Result(); n != 0 {
		t.Fatal("extend re-created the lock")
	}
}

func TestMutexScripts_WrongTypeKeyFailsAndIsUntouched(t *testing.T) {
	ctx, rdb := setup(t)
	rdb.HSet(ctx, lockKey, "field", "value")
	before, _ := rdb.Dump(ctx, lockKey).Result()
	_, err := MutexAcquire.Run(ctx, rdb, []string{lockKey, fenceKey, tombstone, waitersKey}, "owner-a", 10000, "w", 3000).Result()
	if err == nil {
		t.Fatal("acquire on a hash: no error, want WRONGTYPE")
	}
	after, _ := rdb.Dump(ctx, lockKey).Result()
	if after != before {
		t.Fatal("acquire changed a key of the wrong type")
	}
	if n, _ := rdb.Exists(ctx, fenceKey).Result(); n != 0 {
		t.Fatal("acquire on a wrong-type key minted a fencing token")
	}
}

func TestMutexRelease_WakesTheRegisteredWaiterOnly(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	acquire(t, ctx, rdb, "owner-a")
	acquireAsWaiter(t, ctx, rdb, "owner-b", "waiter-b")
	acquireAsWaiter(t, ctx, rdb, "owner-c", "waiter-c")
	if n, _ := rdb.ZCard(ctx, waitersKey).Result(); n != 2 {
		t.Fatalf("%d waiters registered, want 2", n)
	}
	release(t, ctx, rdb, "owner-a")
	expectMessage(t, messages, "waiter-b")
	if n, _ := rdb.ZCard(ctx, waitersKey).Result(); n != 1 {
		t.Fatalf("%d waiters left after one release, want 1", n)
	}
	// The woken waiter takes the lock and is no longer registered.
	if res := acquireAsWaiter(t, ctx, rdb, "owner-b2", "waiter-b"); res[0] != 1 {
		t.Fatalf("woken waiter: %v, want acquired", res)
	}
	release(t, ctx, rdb, "owner-b2")
	expectMessage(t, messages, "waiter-c")
}

func TestMutexRelease_SkipsExpiredWaiters(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	acquire(t, ctx, rdb, "owner-a")
	rdb.ZAdd(ctx, waitersKey, redis.Z{Score: 1, Member: "long-dead"}) // expired in 1970
	acquireAsWaiter(t, ctx, rdb, "owner-b", "waiter-b")
	release(t, ctx, rdb, "owner-a")
	expectMessage(t, messages, "waiter-b")
}

// A waiter picked by a release that then gives up must not swallow the
// wake-up: the next waiter gets it.
func TestMutexAbandon_PickedWaiterPassesTheWakeUpOn(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	acquire(t, ctx, rdb, "owner-a")
	acquireAsWaiter(t, ctx, rdb, "owner-b", "waiter-b")
	acquireAsWaiter(t, ctx, rdb, "owner-c", "waiter-c")
	release(t, ctx, rdb, "owner-a")
	expectMessage(t, messages, "waiter-b")
	abandon(t, ctx, rdb, "", "waiter-b")
	expectMessage(t, messages, "waiter-c")
}

// A waiter that leaves while still registered just goes: the holder's
// release will wake someone else.
func TestMutexAbandon_RegisteredWaiterLeavesQuietly(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	acquire(t, ctx, rdb, "owner-a")
	acquireAsWaiter(t, ctx, rdb, "owner-b", "waiter-b")
	acquireAsWaiter(t, ctx, rdb, "owner-c", "waiter-c")
	abandon(t, ctx, rdb, "", "waiter-b")
	release(t, ctx, rdb, "owner-a")
	expectMessage(t, messages, "waiter-c")
	if n, _ := rdb.Exists(ctx, "t:{m}:void:").Result(); n != 0 {
		t.Fatal("a waiter leaving with no attempt in doubt wrote a tombstone")
	}
}

// A value of another type under the fencing counter or the waiter set fails
// the acquire and leaves no hold behind; a release still releases.
func TestMutexScripts_ForeignValueInAnyKeyLeavesNoHold(t *testing.T) {
	for _, foreign := range []string{fenceKey, waitersKey} {
		t.Run(foreign, func(t *testing.T) {
			ctx, rdb := setup(t)
			rdb.HSet(ctx, foreign, "field", "value")
			before, _ := rdb.Dump(ctx, foreign).Result()
			_, err := MutexAcquire.Run(ctx, rdb, []string{lockKey, fenceKey, tombstone, waitersKey},
				"owner-a", 10000, "waiter-a", 3000).Result()
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("acquire: %v, want WRONGTYPE", err)
			}
			if n, _ := rdb.Exists(ctx, lockKey).Result(); n != 0 {
				t.Fatal("a failed acquire left its hold behind")
			}
			if after, _ := rdb.Dump(ctx, foreign).Result(); after != before {
				t.Fatal("the foreign value was changed")
			}
		})
	}
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, "owner-a")
	rdb.HSet(ctx, waitersKey, "field", "value")
	if n := release(t, ctx, rdb, "owner-a"); n != 1 {
		t.Fatalf("release with a foreign waiter set: %d, want 1", n)
	}
}
