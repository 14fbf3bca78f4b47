package scripts

import (
	"context"
	"strconv"
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
	return acquireAsWaiter(t, ctx, rdb, owner, "", "")
}

// registration is what a Mutex waiter of the client tagged "c1" registers
// as (see hand_next.lua), for a TTL of 10 s.
func registration(waiter string, attempt int, owner string) string {
	return "c1/" + waiter + ":" + strconv.Itoa(attempt) + ":10000:" + owner
}

// acquireAsWaiter attempts, registering entry (when not "") if refused, in
// place of prev (when not "").
func acquireAsWaiter(t *testing.T, ctx context.Context, rdb *redis.Client, owner, entry, prev string) []int64 {
	t.Helper()
	res, err := MutexAcquire.Run(ctx, rdb, []string{lockKey, fenceKey, "t:{m}:void:" + owner, waitersKey},
		owner, 10000, entry, 3000, prev).Int64Slice()
	if err != nil {
		t.Fatalf("acquire by %s: %v", owner, err)
	}
	return res
}

// queueWaiter makes waiter "0"+x, of owner "owner-"+x, wait for the held
// lock: its first attempt, refused, registers it. It returns the
// registration.
func queueWaiter(t *testing.T, ctx context.Context, rdb *redis.Client, x string) string {
	t.Helper()
	entry := registration("0"+x, 1, "owner-"+x)
	if res := acquireAsWaiter(t, ctx, rdb, "owner-"+x, entry, ""); res[0] != 0 {
		t.Fatalf("waiter %s: %v, want refused", x, res)
	}
	return entry
}

func release(t *testing.T, ctx context.Context, rdb *redis.Client, owner string) int64 {
	t.Helper()
	n, err := MutexRelease.Run(ctx, rdb, []string{lockKey, channel, waitersKey, fenceKey}, owner, "PUBLISH").Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func abandon(t *testing.T, ctx context.Context, rdb *redis.Client, owner, entry string) int64 {
	t.Helper()
	n, err := MutexAbandon.Run(ctx, rdb, []string{lockKey, channel, "t:{m}:void:" + owner, waitersKey, fenceKey},
		owner, "PUBLISH", 10000, entry, "").Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// listen subscribes to the lock's channel, where the waiters that take no
// hand-over are woken, and to client c1's own, where its Mutex waiters are
// handed the lock; it returns their messages, prefixed by "c1 " for the
// second.
func listen(t *testing.T, ctx context.Context, rdb *redis.Client) <-chan string {
	t.Helper()
	ps := rdb.Subscribe(ctx, channel, channel+":c1")
	t.Cleanup(func() { _ = ps.Close() })
	for range 2 {
		if _, err := ps.Receive(ctx); err != nil { // the confirmations
			t.Fatal(err)
		}
	}
	messages := make(chan string, 16)
	go func() {
		for m := range ps.Channel() {
			if m.Channel != channel {
				m.Payload = "c1 " + m.Payload
			}
			messages <- m.Payload
		}
	}()
	return messages
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

// expectWord is expectMessage for what listen returns.
func expectWord(t *testing.T, words <-chan string, want string) {
	t.Helper()
	if got := nextMessage(t, words); got != want {
		t.Fatalf("published %q, want %q", got, want)
	}
}

func nextMessage(t *testing.T, messages <-chan string) string {
	t.Helper()
	select {
	case m := <-messages:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("nothing published")
		return ""
	}
}

// expectHandOver checks that the lock went to owner as the waiter's
// registration for attempt said, with fencing token fence, for what its
// registration had left (3 s at most), and that the waiter was told so.
func expectHandOver(t *testing.T, ctx context.Context, rdb *redis.Client, messages <-chan string,
	waiter string, attempt int, owner string, fence int64) {
	t.Helper()
	got := nextMessage(t, messages)
	prefix := "c1 " + waiter + ":" + strconv.Itoa(attempt) + ":" + strconv.FormatInt(fence, 10) + ":"
	px, err := strconv.Atoi(strings.TrimPrefix(got, prefix))
	if !strings.HasPrefix(got, prefix) || err != nil || px <= 0 || px > 3000 {
		t.Fatalf("published %q, want %q and the ms granted (up to the 3000 registered)", got, prefix)
	}
	if v, _ := rdb.Get(ctx, lockKey).Result(); v != owner {
		t.Fatalf("lock holds %q after the hand-over, want %q", v, owner)
	}
	if ms, _ := rdb.PTTL(ctx, lockKey).Result(); ms <= 0 || ms > time.Duration(px)*time.Millisecond {
		t.Fatalf("handed-over lock expires in %v, want within the %d ms granted", ms, px)
	}
	if n, _ := rdb.Get(ctx, fenceKey).Int64(); n != fence {
		t.Fatalf("fencing counter %d after the hand-over, want %d", n, fence)
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
	_, err := MutexAcquire.Run(ctx, rdb, []string{lockKey, fenceKey, tombstone, waitersKey}, "owner-a", 10000, registration("0a", 1, "owner-a"), 3000, "").Result()
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

func TestMutexRelease_HandsTheLockToTheFirstRegisteredWaiter(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	acquire(t, ctx, rdb, "owner-a")
	queueWaiter(t, ctx, rdb, "b")
	queueWaiter(t, ctx, rdb, "c")
	if n, _ := rdb.ZCard(ctx, waitersKey).Result(); n != 2 {
		t.Fatalf("%d waiters registered, want 2", n)
	}
	release(t, ctx, rdb, "owner-a")
	expectHandOver(t, ctx, rdb, messages, "0b", 1, "owner-b", 2)
	if n, _ := rdb.ZCard(ctx, waitersKey).Result(); n != 1 {
		t.Fatalf("%d waiters left after one release, want 1", n)
	}
	release(t, ctx, rdb, "owner-b")
	expectHandOver(t, ctx, rdb, messages, "0c", 1, "owner-c", 3)
	release(t, ctx, rdb, "owner-c")
	if n, _ := rdb.Exists(ctx, lockKey, waitersKey).Result(); n != 0 {
		t.Fatalf("%d keys left after the last release, want none but the fencing counter", n)
	}
}

// Waiters registered within one millisecond are handed the lock in the order
// they came, not in their ids' order: registrations are timed to the µs.
func TestMutexRelease_HandsOverInArrivalOrderWithinAMillisecond(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	acquire(t, ctx, rdb, "owner-a")
	pipe := rdb.Pipeline() // one after the other, well within a ms
	for _, w := range []string{"ff", "00"} {
		MutexAcquire.Run(ctx, pipe, []string{lockKey, fenceKey, "t:{m}:void:owner-" + w, waitersKey},
			"owner-"+w, 10000, registration(w, 1, "owner-"+w), 3000, "")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	release(t, ctx, rdb, "owner-a")
	expectHandOver(t, ctx, rdb, messages, "ff", 1, "owner-ff", 2)
}

// A waiter's each attempt replaces its registration: one waiter, one entry,
// and the hand-over names its latest attempt.
func TestMutexAcquire_ReRegistrationReplacesThePrevious(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	acquire(t, ctx, rdb, "owner-a")
	first := queueWaiter(t, ctx, rdb, "b")
	acquireAsWaiter(t, ctx, rdb, "owner-b", registration("0b", 2, "owner-b"), first)
	if got, _ := rdb.ZRange(ctx, waitersKey, 0, -1).Result(); len(got) != 1 || got[0] != registration("0b", 2, "owner-b") {
		t.Fatalf("registrations %q, want the second attempt's alone", got)
	}
	release(t, ctx, rdb, "owner-a")
	expectHandOver(t, ctx, rdb, messages, "0b", 2, "owner-b", 2)
}

// A waiter that missed the word of its hand-over finds the lock its own at
// its next attempt: acquired with the token minted for it, and extended to
// its TTL from then.
func TestMutexAcquire_HandedOverLockIsFoundByTheNextAttempt(t *testing.T) {
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, "owner-a")
	entry := queueWaiter(t, ctx, rdb, "b")
	release(t, ctx, rdb, "owner-a")
	res := acquireAsWaiter(t, ctx, rdb, "owner-b", registration("0b", 2, "owner-b"), entry)
	if res[0] != 1 || res[1] != 2 {
		t.Fatalf("attempt after the hand-over: %v, want {1, 2}", res)
	}
	if ms, _ := rdb.PTTL(ctx, lockKey).Result(); ms <= 3*time.Second {
		t.Fatalf("lock expires in %v, want extended to the 10 s TTL", ms)
	}
	if n, _ := rdb.Exists(ctx, waitersKey).Result(); n != 0 {
		t.Fatal("the attempt registered although it holds the lock")
	}
}

func TestMutexRelease_SkipsExpiredWaiters(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	acquire(t, ctx, rdb, "owner-a")
	rdb.ZAdd(ctx, waitersKey, redis.Z{Score: 1, Member: registration("0d", 1, "dead")}) // expired in 1970
	queueWaiter(t, ctx, rdb, "b")
	release(t, ctx, rdb, "owner-a")
	expectHandOver(t, ctx, rdb, messages, "0b", 1, "owner-b", 2)
}

// A MultiLock waiter registers its id alone: it is woken, not handed the
// lock, which is left free for its next attempt.
func TestMutexRelease_WakesAWaiterThatTakesNoHandOver(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	acquire(t, ctx, rdb, "owner-a")
	rdb.ZAdd(ctx, waitersKey, redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "0e"})
	release(t, ctx, rdb, "owner-a")
	expectWord(t, messages, "0e")
	if n, _ := rdb.Exists(ctx, lockKey).Result(); n != 0 {
		t.Fatal("the lock was not freed for the woken waiter")
	}
}

// A waiter handed the lock that then gives up passes it on to the next.
func TestMutexAbandon_HandedOverLockIsPassedOn(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	acquire(t, ctx, rdb, "owner-a")
	b := queueWaiter(t, ctx, rdb, "b")
	queueWaiter(t, ctx, rdb, "c")
	release(t, ctx, rdb, "owner-a")
	expectHandOver(t, ctx, rdb, messages, "0b", 1, "owner-b", 2)
	if n := abandon(t, ctx, rdb, "owner-b", b); n != 1 {
		t.Fatalf("abandon by the waiter handed the lock: %d, want 1 (it held it)", n)
	}
	expectHandOver(t, ctx, rdb, messages, "0c", 1, "owner-c", 3)
}

// A waiter woken without a hand-over (see above) that gives up passes the
// wake-up on.
func TestMutexAbandon_PickedWaiterPassesTheWakeUpOn(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	acquire(t, ctx, rdb, "owner-a")
	// Registered to expire before 0c's 3 s, so it comes first.
	rdb.ZAdd(ctx, waitersKey, redis.Z{Score: float64(time.Now().Add(time.Second).UnixMilli()), Member: "0e"})
	queueWaiter(t, ctx, rdb, "c")
	release(t, ctx, rdb, "owner-a")
	expectWord(t, messages, "0e")
	abandon(t, ctx, rdb, "", "0e")
	expectHandOver(t, ctx, rdb, messages, "0c", 1, "owner-c", 2)
}

// A waiter that leaves while still registered just goes: the holder's
// release hands the lock to someone else.
func TestMutexAbandon_RegisteredWaiterLeavesQuietly(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	acquire(t, ctx, rdb, "owner-a")
	b := queueWaiter(t, ctx, rdb, "b")
	queueWaiter(t, ctx, rdb, "c")
	abandon(t, ctx, rdb, "", b)
	release(t, ctx, rdb, "owner-a")
	expectHandOver(t, ctx, rdb, messages, "0c", 1, "owner-c", 2)
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
			// A waiter's second attempt, finding the lock free: it takes the
			// lock and withdraws its registration.
			_, err := MutexAcquire.Run(ctx, rdb, []string{lockKey, fenceKey, tombstone, waitersKey},
				"owner-a", 10000, registration("0a", 2, "owner-a"), 3000, registration("0a", 1, "owner-a")).Result()
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

	// A foreign fencing counter: the waiter is woken rather than handed a
	// hold without a token, and the counter is left alone.
	ctx, rdb = setup(t)
	messages := listen(t, ctx, rdb)
	acquire(t, ctx, rdb, "owner-a")
	queueWaiter(t, ctx, rdb, "b")
	rdb.Del(ctx, fenceKey)
	rdb.HSet(ctx, fenceKey, "field", "value")
	if n := release(t, ctx, rdb, "owner-a"); n != 1 {
		t.Fatalf("release with a foreign fencing counter: %d, want 1", n)
	}
	expectWord(t, messages, "c1 0b")
	if n, _ := rdb.Exists(ctx, lockKey).Result(); n != 0 {
		t.Fatal("the lock was handed over without a fencing token")
	}
}
