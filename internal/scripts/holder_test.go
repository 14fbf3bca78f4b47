package scripts

import (
	"testing"
	"time"
)

// A refused renewal says why: the key gone (0), another owner's (-1), or
// removed by force from this owner (-2), whoever holds it since.
func TestMutexExtend_SaysWhyItRefuses(t *testing.T) {
	ctx, rdb := setup(t)
	forced := lockKey + ":forced"
	keys := []string{lockKey, forced, lockKey + ":holder"}
	extend := func() int64 {
		t.Helper()
		n, err := MutexExtend.Run(ctx, rdb, keys, tok("a"), 10000).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	rdb.Set(ctx, lockKey, tok("b"), time.Minute)
	if n := extend(); n != -1 {
		t.Fatalf("another owner's: %d, want -1", n)
	}
	rdb.Del(ctx, lockKey)
	if n := extend(); n != 0 {
		t.Fatalf("gone: %d, want 0", n)
	}
	rdb.Set(ctx, forced, tok("a"), time.Minute)
	if n := extend(); n != -2 {
		t.Fatalf("forced: %d, want -2", n)
	}
	rdb.Set(ctx, lockKey, tok("b"), time.Minute)
	if n := extend(); n != -2 {
		t.Fatalf("forced, then taken: %d, want -2", n)
	}
}

// A waiter's registration carries its holder info: the release that hands
// it the lock stores it for the new holder, and the releaser's goes.
func TestMutexRelease_HandsTheWaitersHolderInfoOver(t *testing.T) {
	ctx, rdb := setup(t)
	holder := lockKey + ":holder"
	res, err := AcquireReply(MutexAcquire.Run(ctx, rdb, []string{lockKey, fenceKey, "t:{m}:void:" + tok("a"), waitersKey, holder},
		argvOf(MutexAcquireArgs{Acquire: acq(tok("a"), 10000, ""), Info: `{"user":"a"}`}, "")...))
	if err != nil || res[0] != 1 {
		t.Fatalf("acquire: %v, %v", res, err)
	}
	if v := rdb.Get(ctx, holder).Val(); v != tok("a")+`{"user":"a"}` {
		t.Fatalf("holder info %q", v)
	}
	entry := registration("0b", 1, tok("b")) + `{"user":"b"}`
	res, err = AcquireReply(MutexAcquire.Run(ctx, rdb, []string{lockKey, fenceKey, "t:{m}:void:" + tok("b"), waitersKey, holder},
		argvOf(MutexAcquireArgs{Acquire: acq(tok("b"), 10000, entry), Info: `{"user":"b"}`}, "")...))
	if err != nil || res[0] != 0 {
		t.Fatalf("waiter: %v, %v", res, err)
	}
	n, err := MutexRelease.Run(ctx, rdb, []string{lockKey, channel, waitersKey, fenceKey, holder}, tok("a"), "PUBLISH").Int64()
	if err != nil || n != 1 {
		t.Fatalf("release: %d, %v", n, err)
	}
	if v := rdb.Get(ctx, lockKey).Val(); v != tok("b") {
		t.Fatalf("lock handed to %q", v)
	}
	if v := rdb.Get(ctx, holder).Val(); v != tok("b")+`{"user":"b"}` {
		t.Fatalf("holder info after the hand-over %q", v)
	}
	// Both keys are set in one script with one TTL; a server whose scripts
	// do not freeze the clock (Redis before 7.2) may set the info's a ms
	// after the lock's. The lock's is read first, so the info's, read
	// later, is not above it otherwise.
	lockTTL := rdb.PTTL(ctx, lockKey).Val()
	if ttl := rdb.PTTL(ctx, holder).Val(); ttl <= 0 || ttl > lockTTL+time.Millisecond {
		t.Fatalf("holder info's TTL %v", ttl)
	}
	n, err = MutexRelease.Run(ctx, rdb, []string{lockKey, channel, waitersKey, fenceKey, holder}, tok("b"), "PUBLISH").Int64()
	if err != nil || n != 1 || rdb.Exists(ctx, holder).Val() != 0 {
		t.Fatalf("last release: %d, %v; info left: %d", n, err, rdb.Exists(ctx, holder).Val())
	}
}
