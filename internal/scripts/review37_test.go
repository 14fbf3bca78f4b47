package scripts

import "testing"

// A call registered twice under attempt numbers without a leading 0: an
// older protocol-2 client's call (its numbers never carry one), whose
// attempt took a read timeout and whose late copy registered it again,
// or a copy that landed late with no read timeout (held by a proxy in
// front of Redis). The release that hands the lock to one registration
// must withdraw the other, or the call's own release hands the lock to
// it: held then for a call that has gone (SAFETY.md's row "a release
// handed the lock to a gone call"). Before the cut every hand-over did.
func TestReview37_AHandOverWithdrawsADuplicateWithoutALeadingZero(t *testing.T) {
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
