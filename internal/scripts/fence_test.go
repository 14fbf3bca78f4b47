package scripts

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// An acquisition found already the caller's (a resend, or a hand-over the
// waiter did not hear of) reports the counter as its token; with the
// counter gone meanwhile, it mints a new one rather than reporting none.
func TestHeldToken_ACounterGoneIsMintedAnew(t *testing.T) {
	ctx, rdb := setup(t)
	first := acquire(t, ctx, rdb, "owner-a")
	rdb.Del(ctx, fenceKey)
	if again := acquire(t, ctx, rdb, "owner-a"); len(again) != 2 || again[0] != 1 || again[1] <= first[1] {
		t.Fatalf("Mutex resend after its counter went: %v; want {1, a token above %d}", again, first[1])
	}

	ctx, rdb = setup(t)
	first = fairTry(t, ctx, rdb, fairA, "")
	rdb.Del(ctx, fenceKey)
	if again := fairTry(t, ctx, rdb, fairA, ""); len(again) != 2 || again[0] != 1 || again[1] <= first[1] {
		t.Fatalf("FairMutex resend after its counter went: %v; want {1, a token above %d}", again, first[1])
	}

	ctx, rdb = setup(t)
	first = multiTry(t, ctx, rdb, "owner-a", "", 1)
	rdb.Del(ctx, "t:{m}:fence", "t:{n}:fence")
	if again := multiTry(t, ctx, rdb, "owner-a", "", 1); len(again) != 3 || again[0] != 1 || again[1] <= first[1] || again[2] <= first[2] {
		t.Fatalf("MultiLock resend after its counters went: %v; want {1, tokens above %v}", again, first[1:])
	}
}

// A FairMutex waiter takes a hand-over only with a token above what its
// attempt read; with no counter to read, that is the clock, so that a
// hand-over older than the attempt is not taken for a new one.
func TestFairAcquire_QueuedWithoutACounterReadsTheClock(t *testing.T) {
	ctx, rdb := setup(t)
	held := fairTry(t, ctx, rdb, fairA, "")
	rdb.Del(ctx, fenceKey)
	before := time.Now().Add(-time.Minute).UnixMicro() // the server's clock is this machine's, within a minute
	refused := fairTry(t, ctx, rdb, fairB, "c1/0b")
	if len(refused) != 3 || refused[0] != 0 || refused[2] < before || refused[2] < held[1] {
		t.Fatalf("a waiter queued with no counter: %v; want {0, ms left, the clock in µs}", refused)
	}
	if n := runInt(t, ctx, rdb, FairRelease, fairKeys, fairA, "PUBLISH"); n != 1 {
		t.Fatalf("release: %d, want 1", n)
	}
	if minted, _ := rdb.Get(ctx, fenceKey).Int64(); minted <= refused[2] {
		t.Fatalf("the hand-over's token %d is not above the %d its waiter read", minted, refused[2])
	}
}

// The counter expires FenceRetentionTTLs hold TTLs after each mint.
func TestMintToken_CounterExpiresRetentionAfterTheMint(t *testing.T) {
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, "owner-a") // a 10 s TTL
	want := FenceRetentionTTLs * 10 * time.Second
	if left := rdb.PTTL(ctx, fenceKey).Val(); left <= want-time.Minute || left > want {
		t.Fatalf("counter expires in %v after a mint for 10 s, want %v", left, want)
	}
}

// A release's check for a hold taken anew since its grant reads the
// counter as dlock's only when it is one (last_token): a value dlock did
// not write there, numeric to Lua but no counter of dlock's, tells nothing,
// as taken_since says, and the release of a hold that lasted answers 1.
func TestMutexRelease_AForeignValueAtTheCounterTellsNothingOfARetake(t *testing.T) {
	ctx, rdb := setup(t)
	granted := acquire(t, ctx, rdb, tok("a"))
	if granted[0] != 1 {
		t.Fatalf("acquire: %v", granted)
	}
	rdb.Set(ctx, fenceKey, "1e300", 0) // a user's, after the grant
	keys := []string{lockKey, channel, waitersKey, fenceKey, "t:{m}:holder", "t:{m}:released:a"}
	if n := runInt(t, ctx, rdb, MutexRelease, keys, tok("a"), "PUBLISH", granted[1]); n != 1 {
		t.Fatalf("release of a hold that lasted, a foreign value at its counter: %d, want 1", n)
	}
	if v := rdb.Get(ctx, fenceKey).Val(); v != "1e300" {
		t.Fatalf("the foreign value became %q", v)
	}
}

// A Redlock node's counter is raised to the quorum's token, never lowered
// (a copy may land late), and kept without expiry; one that is not dlock's
// is refused, unchanged.
func TestRedlockFence_RaisesNeverLowersAndKeeps(t *testing.T) {
	ctx, rdb := setup(t)
	for _, c := range []struct{ stored, token, want string }{
		{"", "500", "500"},
		{"400", "500", "500"},
		{"600", "500", "600"},
		{"500", "500", "500"},
	} {
		rdb.Del(ctx, fenceKey)
		if c.stored != "" {
			rdb.Set(ctx, fenceKey, c.stored, time.Hour)
		}
		runInt(t, ctx, rdb, RedlockFence, []string{fenceKey}, c.token)
		if got, ttl := rdb.Get(ctx, fenceKey).Val(), rdb.PTTL(ctx, fenceKey).Val(); got != c.want || ttl != -time.Nanosecond {
			t.Errorf("counter %q raised to %s: %q with TTL %v; want %q without", c.stored, c.token, got, ttl, c.want)
		}
	}
	rdb.Set(ctx, fenceKey, "their-data", time.Hour)
	if err := RedlockFence.Run(ctx, rdb, []string{fenceKey}, "500").Err(); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("a foreign counter raised: %v; want WRONGTYPE", err)
	}
	if got := rdb.Get(ctx, fenceKey).Val(); got != "their-data" {
		t.Errorf("a foreign counter became %q", got)
	}
}

// A token minted from the clock is stored in its own digits, joined from
// TIME's (µs padded to 6: US_PADS, for each number of digits): each mint's
// counter is the token's digits, and the token is the server's clock. Mints over a whole second of the
// server's clock meet every µs of 5 digits or fewer: a tenth of them.
func TestMintToken_StoresTheClocksTokenInItsDigits(t *testing.T) {
	ctx, rdb := setup(t)
	var pads string
	for _, h := range libraries[prelude] {
		if h.names[0] == "US_PADS" {
			pads = h.code
		}
	}
	for _, us := range []string{"0", "7", "42", "999", "1234", "12345", "123456"} {
		want := strings.Repeat("0", 6-len(us)) + us
		if got, err := rdb.Eval(ctx, pads+"return US_PADS[#ARGV[1]] .. ARGV[1]", nil, us).Text(); got != want || err != nil {
			t.Errorf("µs %s padded: %q, %v; want %q", us, got, err, want)
		}
	}
	start, _ := rdb.Time(ctx).Result()
	short := 0 // mints whose µs had fewer than 6 digits
	for {
		before, _ := rdb.Time(ctx).Result()
		if before.Sub(start) > 1100*time.Millisecond {
			break
		}
		got := acquire(t, ctx, rdb, tok("a"))
		after, _ := rdb.Time(ctx).Result()
		stored := rdb.Get(ctx, fenceKey).Val()
		if len(got) != 2 || got[0] != 1 || stored != strconv.FormatInt(got[1], 10) ||
			got[1] < before.UnixMicro() || got[1] > after.UnixMicro() {
			t.Fatalf("minted %v, stored %q; want the clock's µs, between %d and %d, in its digits", got, stored, before.UnixMicro(), after.UnixMicro())
		}
		if got[1]%1_000_000 < 100_000 {
			short++
		}
		rdb.Del(ctx, lockKey, fenceKey) // the next mint is the clock's
	}
	if short == 0 {
		t.Fatal("no mint in a second had a µs of 5 digits or fewer")
	}
}
