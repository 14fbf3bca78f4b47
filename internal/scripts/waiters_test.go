package scripts

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// How every script that registers waiters keeps their set (register_waiter
// in common.lua): it lives as long as its longest registration, and sheds
// the registrations that ran out.

// A waiter with a short refresh registering after one with a long refresh
// must not cut the set's life below the long one's registration.
func TestMutexAcquire_ShortRegistrationNeverShortensTheSet(t *testing.T) {
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, tok("a"))
	for _, w := range []struct {
		owner string
		lease int64 // ms
	}{{tok("b"), 600000}, {tok("c"), 100}} {
		res, err := AcquireReply(MutexAcquire.Run(ctx, rdb, []string{lockKey, fenceKey, "t:{m}:void:" + w.owner, waitersKey},
			w.owner, 10000, registration("0"+w.owner, 1, w.owner), w.lease, ""))
		if err != nil || res[0] != 0 {
			t.Fatalf("waiter %s: %v, %v; want refused", w.owner, res, err)
		}
	}
	if ttl := rdb.PTTL(ctx, waitersKey).Val(); ttl < 9*time.Minute {
		t.Fatalf("waiters expire in %v; want the 10 min of the longest registration", ttl)
	}
}

// A registration drops those that ran out: under constant contention the
// set never expires, and nothing else would.
func TestRWAcquire_RegistrationDropsExpiredOnes(t *testing.T) {
	ctx, rdb := setup(t)
	expectGranted(t, tryRW(t, ctx, rdb, hold("w", "a", "A"), ""), "writer A")
	expectRefused(t, tryRW(t, ctx, rdb, hold("w", "b", "B"), "dead"), "writer B")
	if err := rdb.ZAddXX(ctx, rwWriters, redis.Z{Score: 1, Member: "dead"}).Err(); err != nil { // ran out long ago
		t.Fatal(err)
	}
	expectRefused(t, tryRW(t, ctx, rdb, hold("w", "c", "C"), "live"), "writer C")
	if got := rdb.ZRange(ctx, rwWriters, 0, -1).Val(); len(got) != 1 || got[0] != "live" {
		t.Fatalf("registrations %q; want the live one alone", got)
	}
}

// A call registered twice, whatever its attempt numbers say: an older
// client's call whose late copy registered it again, or a copy that
// landed late with no read timeout (held by a proxy in front of Redis).
// The release that hands the lock to one registration must withdraw the
// other, or the call's own release hands the lock to it: held then for a
// call that has gone (SAFETY.md's row "a release handed the lock to a
// gone call").
func TestMutexRelease_HandOverWithdrawsTheWaitersOtherRegistrations(t *testing.T) {
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, tok("a"))
	first := registration("0b", 1, tok("b"))
	if res := acquireAsWaiter(t, ctx, rdb, tok("b"), first, ""); res[0] != 0 {
		t.Fatalf("b's first attempt: %v, want refused", res)
	}
	second := registration("0b", 2, tok("b"))
	if res := acquireAsWaiter(t, ctx, rdb, tok("b"), second, first); res[0] != 0 {
		t.Fatalf("b's second attempt: %v, want refused", res)
	}
	// The late copy of b's first attempt registers it again, behind.
	if res := acquireAsWaiter(t, ctx, rdb, tok("b"), first, ""); res[0] != 0 {
		t.Fatalf("the late copy of b's first attempt: %v, want refused", res)
	}
	release(t, ctx, rdb, tok("a")) // hands the lock to b's second registration
	if holder, _ := rdb.Get(ctx, lockKey).Result(); holder != tok("b") {
		t.Fatalf("a's release handed the lock to %q, want b", holder)
	}
	release(t, ctx, rdb, tok("b")) // b is done
	if holder, err := rdb.Get(ctx, lockKey).Result(); err == nil {
		t.Fatalf("b released, and the lock is held by %q: a registration of b's outlived its hand-over", holder)
	}
}
