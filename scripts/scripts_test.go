package scripts

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
)

// The scripts' contracts, on a real server: what each returns and leaves in
// Redis, including when sent twice or out of order.

const (
	lockKey   = "t:{m}"
	fenceKey  = "t:{m}:fence"
	channel   = "t:{m}:wake"
	tombstone = "t:{m}:void:owner-a"
)

func setup(t *testing.T) (context.Context, *redis.Client) {
	rdb := redistest.Start(t).Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, rdb
}

func acquire(t *testing.T, ctx context.Context, rdb *redis.Client, owner string) []int64 {
	t.Helper()
	res, err := MutexAcquire.Run(ctx, rdb, []string{lockKey, fenceKey, "t:{m}:void:" + owner}, owner, 10000).Int64Slice()
	if err != nil {
		t.Fatalf("acquire by %s: %v", owner, err)
	}
	return res
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
	n, err := MutexAbandon.Run(ctx, rdb, []string{lockKey, channel, tombstone}, "owner-a", "PUBLISH", 10000).Int64()
	if err != nil || n != 0 {
		t.Fatalf("abandon before arrival: %d, %v; want 0", n, err)
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
	n, err := MutexAbandon.Run(ctx, rdb, []string{lockKey, channel, tombstone}, "owner-a", "PUBLISH", 10000).Int64()
	if err != nil || n != 1 {
		t.Fatalf("abandon of an applied attempt: %d, %v; want 1", n, err)
	}
	if n, _ := rdb.Exists(ctx, lockKey).Result(); n != 0 {
		t.Fatal("abandon left the hold in place")
	}
}

func TestMutexRelease_SentTwiceReleasesOnlyOnce(t *testing.T) {
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, "owner-a")
	release := func(owner string) int64 {
		n, err := MutexRelease.Run(ctx, rdb, []string{lockKey, channel}, owner, "PUBLISH").Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := release("owner-a"); n != 1 {
		t.Fatalf("release: %d, want 1", n)
	}
	acquire(t, ctx, rdb, "owner-b")
	if n := release("owner-a"); n != 0 {
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
	_, err := MutexAcquire.Run(ctx, rdb, []string{lockKey, fenceKey, tombstone}, "owner-a", 10000).Result()
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
