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
	tombstone  = "t:{m}:void:0000000000000000000000000000000a" // of tok("a")
)

func setup(t *testing.T) (context.Context, *redis.Client) {
	rdb := redistest.Start(t).Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if err := rdb.FunctionLoadReplace(ctx, Library).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(asFunctions{})
	return ctx, rdb
}

// asFunctions sends the scripts' EVALSHA commands (Script.Run's) as FCALL
// of their functions in Library, as dlock does: the tests here run the
// scripts as dlock runs them. EVALSHA runs the same text, the helpers
// defined at every call.
type asFunctions struct{}

func (asFunctions) DialHook(next redis.DialHook) redis.DialHook { return next }

func (asFunctions) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		asFunction(cmd)
		return next(ctx, cmd)
	}
}

func (asFunctions) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			asFunction(cmd)
		}
		return next(ctx, cmds)
	}
}

func asFunction(cmd redis.Cmder) {
	if args := cmd.Args(); cmd.Name() == "evalsha" {
		if s := Of(args[1].(string)); s != nil {
			args[0], args[1] = "fcall", Function(s)
		}
	}
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
	res, err := AcquireReply(MutexAcquire.Run(ctx, rdb, []string{lockKey, fenceKey, "t:{m}:void:" + owner, waitersKey},
		argvOf(MutexAcquireArgs{Acquire: acq(owner, 10000, entry), Previous: prev}, "")...))
	if err != nil {
		t.Fatalf("acquire by %s: %v", owner, err)
	}
	return res
}

// tok is test owner x's owner token (x is hex digits): the form a Mutex's
// lock key holds, which the scripts tell from a value dlock did not write.
func tok(x string) string { return strings.Repeat("0", OwnerTokenDigits-len(x)) + x }

// queueWaiter makes waiter "0"+x, of owner tok(x), wait for the held
// lock: its first attempt, refused, registers it. It returns the
// registration.
func queueWaiter(t *testing.T, ctx context.Context, rdb *redis.Client, x string) string {
	t.Helper()
	entry := registration("0"+x, 1, tok(x))
	if res := acquireAsWaiter(t, ctx, rdb, tok(x), entry, ""); res[0] != 0 {
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
		owner, "PUBLISH", entry, "").Int64()
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
// registration for attempt said, with a fencing token above after (the
// last token minted before), for what its registration had left (3 s at
// most), and that the waiter was told so. It returns the token.
func expectHandOver(t *testing.T, ctx context.Context, rdb *redis.Client, messages <-chan string,
	waiter string, attempt int, owner string, after int64) int64 {
	t.Helper()
	got := nextMessage(t, messages)
	prefix := "c1 " + waiter + ":" + strconv.Itoa(attempt) + ":"
	token, granted, _ := strings.Cut(strings.TrimPrefix(got, prefix), ":")
	fence, err1 := strconv.ParseInt(token, 10, 64)
	px, err2 := strconv.Atoi(granted)
	if !strings.HasPrefix(got, prefix) || err1 != nil || fence <= after || err2 != nil || px <= 0 || px > 3000 {
		t.Fatalf("published %q, want %q, a token above %d and the ms granted (up to the 3000 registered)", got, prefix, after)
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
	return fence
}

// A Mutex's or FairMutex's acquire sent twice (go-redis resends after a
// read timeout) reports the same acquisition, and mints once.
func TestAcquire_ResentAcquireCountsOnce(t *testing.T) {
	for name, try := range map[string]func(t *testing.T, ctx context.Context, rdb *redis.Client) []int64{
		"mutex": func(t *testing.T, ctx context.Context, rdb *redis.Client) []int64 {
			return acquire(t, ctx, rdb, tok("a"))
		},
		"fair": func(t *testing.T, ctx context.Context, rdb *redis.Client) []int64 {
			return fairTry(t, ctx, rdb, fairA, "")
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, rdb := setup(t)
			first, again := try(t, ctx, rdb), try(t, ctx, rdb)
			if first[0] != 1 || again[0] != 1 || again[1] != first[1] {
				t.Fatalf("first %v, resend %v: want both acquired with the same fencing token", first, again)
			}
			if n, _ := rdb.Get(ctx, fenceKey).Int64(); n != first[1] {
				t.Fatalf("fencing counter %d after a resent acquire, want %d", n, first[1])
			}
		})
	}
}

func TestMutexAcquire_HeldLockReportsTimeLeft(t *testing.T) {
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, tok("a"))
	res := acquire(t, ctx, rdb, tok("b"))
	if res[0] != 0 || res[1] <= 0 || res[1] > 10000 {
		t.Fatalf("acquire of a held lock: %v, want {0, ms left}", res)
	}
}

// An attempt delayed past its own clean-up (a stalled server, a slow network
// path) must not take the lock when it finally arrives.
func TestMutexAcquire_ArrivingAfterItsAbandonIsRefused(t *testing.T) {
	ctx, rdb := setup(t)
	if n := abandon(t, ctx, rdb, tok("a"), ""); n != 0 {
		t.Fatalf("abandon before arrival: %d; want 0", n)
	}
	if res := acquire(t, ctx, rdb, tok("a")); res[0] != -1 {
		t.Fatalf("late acquire: %v, want {-1, 0}", res)
	}
	if n, _ := rdb.Exists(ctx, lockKey, fenceKey).Result(); n != 0 {
		t.Fatalf("a refused late acquire left %d keys", n)
	}
	if res := acquire(t, ctx, rdb, tok("b")); res[0] != 1 {
		t.Fatalf("another owner after the refused attempt: %v, want acquired", res)
	}
}

func TestMutexRelease_SentTwiceReleasesOnlyOnce(t *testing.T) {
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, tok("a"))
	if n := release(t, ctx, rdb, tok("a")); n != 1 {
		t.Fatalf("release: %d, want 1", n)
	}
	acquire(t, ctx, rdb, tok("b"))
	if n := release(t, ctx, rdb, tok("a")); n != 0 {
		t.Fatalf("resent release: %d, want 0", n)
	}
	if v, _ := rdb.Get(ctx, lockKey).Result(); v != tok("b") {
		t.Fatalf("resent release touched the next holder: key holds %q", v)
	}
}

// A release resent after its reply was lost finds the first copy's mark and
// reports the release; the mark is the owner's alone.
func TestMutexRelease_ResentAfterItsReplyWasLostFindsItsMark(t *testing.T) {
	ctx, rdb := setup(t)
	markedRelease := func(owner string) int64 {
		t.Helper()
		n, err := MutexRelease.Run(ctx, rdb, []string{lockKey, channel, waitersKey, fenceKey, lockKey + ":holder", lockKey + ":released:" + owner},
			owner, "PUBLISH").Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	acquire(t, ctx, rdb, "owner-a")
	if n := markedRelease("owner-a"); n != 1 {
		t.Fatalf("release: %d, want 1", n)
	}
	acquire(t, ctx, rdb, "owner-b")
	if n := markedRelease("owner-a"); n != 1 {
		t.Fatalf("resent release: %d, want 1 (released by its first copy)", n)
	}
	if v, _ := rdb.Get(ctx, lockKey).Result(); v != "owner-b" {
		t.Fatalf("resent release touched the next holder: key holds %q", v)
	}
	if n := markedRelease("owner-c"); n != 0 {
		t.Fatalf("release by an owner that never held: %d, want 0", n)
	}
	if left := rdb.PTTL(ctx, lockKey+":released:owner-a").Val(); left <= 0 || left > 5*time.Second {
		t.Fatalf("mark expires in %v, want within 5s", left)
	}
}

func TestMutexExtend_NeverRecreatesAMissingKey(t *testing.T) {
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, tok("a"))
	rdb.Del(ctx, lockKey)
	n, err := MutexExtend.Run(ctx, rdb, []string{lockKey}, tok("a"), 10000).Int64()
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
	_, err := MutexAcquire.Run(ctx, rdb, []string{lockKey, fenceKey, tombstone, waitersKey}, tok("a"), 10000, registration("0a", 1, tok("a")), 3000, "").Result()
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
	a := acquire(t, ctx, rdb, tok("a"))
	queueWaiter(t, ctx, rdb, "b")
	queueWaiter(t, ctx, rdb, "c")
	if n, _ := rdb.ZCard(ctx, waitersKey).Result(); n != 2 {
		t.Fatalf("%d waiters registered, want 2", n)
	}
	release(t, ctx, rdb, tok("a"))
	second := expectHandOver(t, ctx, rdb, messages, "0b", 1, tok("b"), a[1])
	if n, _ := rdb.ZCard(ctx, waitersKey).Result(); n != 1 {
		t.Fatalf("%d waiters left after one release, want 1", n)
	}
	release(t, ctx, rdb, tok("b"))
	expectHandOver(t, ctx, rdb, messages, "0c", 1, tok("c"), second)
	release(t, ctx, rdb, tok("c"))
	if n, _ := rdb.Exists(ctx, lockKey, waitersKey).Result(); n != 0 {
		t.Fatalf("%d keys left after the last release, want none but the fencing counter", n)
	}
}

// Waiters registered within one millisecond are handed the lock in the order
// they came, not in their ids' order: registrations are timed to the µs.
func TestMutexRelease_HandsOverInArrivalOrderWithinAMillisecond(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	a := acquire(t, ctx, rdb, tok("a"))
	pipe := rdb.Pipeline() // one after the other, well within a ms
	for _, w := range []string{"ff", "00"} {
		MutexAcquire.Run(ctx, pipe, []string{lockKey, fenceKey, "t:{m}:void:" + tok(w), waitersKey},
			tok(w), 10000, registration(w, 1, tok(w)), 3000, "")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	release(t, ctx, rdb, tok("a"))
	expectHandOver(t, ctx, rdb, messages, "ff", 1, tok("ff"), a[1])
}

// A waiter's each attempt replaces its registration: one waiter, one entry,
// and the hand-over names its latest attempt.
func TestMutexAcquire_ReRegistrationReplacesThePrevious(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	a := acquire(t, ctx, rdb, tok("a"))
	first := queueWaiter(t, ctx, rdb, "b")
	acquireAsWaiter(t, ctx, rdb, tok("b"), registration("0b", 2, tok("b")), first)
	if got, _ := rdb.ZRange(ctx, waitersKey, 0, -1).Result(); len(got) != 1 || got[0] != registration("0b", 2, tok("b")) {
		t.Fatalf("registrations %q, want the second attempt's alone", got)
	}
	release(t, ctx, rdb, tok("a"))
	expectHandOver(t, ctx, rdb, messages, "0b", 2, tok("b"), a[1])
}

// A waiter that missed the word of its hand-over finds the lock its own at
// its next attempt: acquired with the token minted for it, and extended to
// its TTL from then.
func TestMutexAcquire_HandedOverLockIsFoundByTheNextAttempt(t *testing.T) {
	ctx, rdb := setup(t)
	a := acquire(t, ctx, rdb, tok("a"))
	entry := queueWaiter(t, ctx, rdb, "b")
	release(t, ctx, rdb, tok("a"))
	minted, _ := rdb.Get(ctx, fenceKey).Int64()
	res := acquireAsWaiter(t, ctx, rdb, tok("b"), registration("0b", 2, tok("b")), entry)
	if res[0] != 1 || res[1] != minted || minted <= a[1] {
		t.Fatalf("attempt after the hand-over: %v, want {1, %d} (the token minted at the hand-over, above %d)", res, minted, a[1])
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
	a := acquire(t, ctx, rdb, tok("a"))
	queueWaiter(t, ctx, rdb, "b")
	// Into the set queueWaiter made, which has a TTL as dlock's sets do.
	rdb.ZAdd(ctx, waitersKey, redis.Z{Score: 1, Member: registration("0d", 1, "dead")}) // expired in 1970
	release(t, ctx, rdb, tok("a"))
	expectHandOver(t, ctx, rdb, messages, "0b", 1, tok("b"), a[1])
}

// A MultiLock waiter registers its id alone: it is woken, not handed the
// lock, which is left free for its next attempt.
func TestMutexRelease_WakesAWaiterThatTakesNoHandOver(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	acquire(t, ctx, rdb, tok("a"))
	rdb.ZAdd(ctx, waitersKey, redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "0e"})
	rdb.PExpire(ctx, waitersKey, time.Minute) // as registration leaves it: dlock's
	release(t, ctx, rdb, tok("a"))
	expectWord(t, messages, "0e")
	if n, _ := rdb.Exists(ctx, lockKey).Result(); n != 0 {
		t.Fatal("the lock was not freed for the woken waiter")
	}
}

// A waiter handed the lock that then gives up passes it on to the next.
func TestMutexAbandon_HandedOverLockIsPassedOn(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	a := acquire(t, ctx, rdb, tok("a"))
	b := queueWaiter(t, ctx, rdb, "b")
	queueWaiter(t, ctx, rdb, "c")
	release(t, ctx, rdb, tok("a"))
	second := expectHandOver(t, ctx, rdb, messages, "0b", 1, tok("b"), a[1])
	if n := abandon(t, ctx, rdb, tok("b"), b); n != 1 {
		t.Fatalf("abandon by the waiter handed the lock: %d, want 1 (it held it)", n)
	}
	expectHandOver(t, ctx, rdb, messages, "0c", 1, tok("c"), second)
}

// A waiter woken without a hand-over (see above) that gives up passes the
// wake-up on.
func TestMutexAbandon_PickedWaiterPassesTheWakeUpOn(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	a := acquire(t, ctx, rdb, tok("a"))
	queueWaiter(t, ctx, rdb, "c")
	// Registered to expire before 0c's 3 s, so it comes first (in the set
	// queueWaiter made, which has a TTL as dlock's sets do).
	rdb.ZAdd(ctx, waitersKey, redis.Z{Score: float64(time.Now().Add(time.Second).UnixMilli()), Member: "0e"})
	release(t, ctx, rdb, tok("a"))
	expectWord(t, messages, "0e")
	abandon(t, ctx, rdb, "", "0e")
	expectHandOver(t, ctx, rdb, messages, "0c", 1, tok("c"), a[1])
}

// A waiter that leaves while still registered just goes: the holder's
// release hands the lock to someone else.
func TestMutexAbandon_RegisteredWaiterLeavesQuietly(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	a := acquire(t, ctx, rdb, tok("a"))
	b := queueWaiter(t, ctx, rdb, "b")
	queueWaiter(t, ctx, rdb, "c")
	abandon(t, ctx, rdb, "", b)
	release(t, ctx, rdb, tok("a"))
	expectHandOver(t, ctx, rdb, messages, "0c", 1, tok("c"), a[1])
	// A copy of its registering attempt may still be on its way: the
	// tombstone refuses it.
	if n, _ := rdb.Exists(ctx, "t:{m}:void:").Result(); n != 1 {
		t.Fatal("a waiter leaving wrote no tombstone")
	}
}

// An abandon releases an attempt that was applied; a copy of that attempt
// resent after its call gave up (go-redis resends after a read timeout)
// finds the tombstone the abandon left while releasing, and takes nothing.
func TestMutexAbandon_ReleasesAnAppliedAttemptAndRefusesItsResend(t *testing.T) {
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, tok("a"))
	if n := abandon(t, ctx, rdb, tok("a"), ""); n != 1 {
		t.Fatalf("abandon of an applied attempt: %d; want 1", n)
	}
	if n, _ := rdb.Exists(ctx, lockKey).Result(); n != 0 {
		t.Fatal("abandon left the hold in place")
	}
	if res := acquire(t, ctx, rdb, tok("a")); res[0] != -1 {
		t.Fatalf("resent attempt: %v, want {-1, 0}", res)
	}
	if n, _ := rdb.Exists(ctx, lockKey).Result(); n != 0 {
		t.Fatal("the resent attempt took the lock")
	}
}

// A late copy of a refused attempt of a call that gave up registers
// nothing: the next release must not hand the lock to a caller that left.
func TestMutexAcquire_LateRegistrationAfterAbandonIsRefused(t *testing.T) {
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, tok("a"))
	entry := registration("0b", 1, tok("b"))
	abandon(t, ctx, rdb, tok("b"), entry)
	if res := acquireAsWaiter(t, ctx, rdb, tok("b"), entry, ""); res[0] != -1 {
		t.Fatalf("late registering attempt: %v, want {-1, 0}", res)
	}
	if n, _ := rdb.Exists(ctx, waitersKey).Result(); n != 0 {
		t.Fatal("the late attempt registered")
	}
	release(t, ctx, rdb, tok("a"))
	if n, _ := rdb.Exists(ctx, lockKey).Result(); n != 0 {
		t.Fatal("the release handed the lock to a call that had left")
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
				argvOf(MutexAcquireArgs{Acquire: acq(tok("a"), 10000, registration("0a", 2, tok("a"))), Previous: registration("0a", 1, tok("a"))}, "")...).Result()
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
	acquire(t, ctx, rdb, tok("a"))
	rdb.HSet(ctx, waitersKey, "field", "value")
	if n := release(t, ctx, rdb, tok("a")); n != 1 {
		t.Fatalf("release with a foreign waiter set: %d, want 1", n)
	}

	// A foreign fencing counter: the waiter is woken rather than handed a
	// hold without a token, and the counter is left alone.
	ctx, rdb = setup(t)
	messages := listen(t, ctx, rdb)
	acquire(t, ctx, rdb, tok("a"))
	queueWaiter(t, ctx, rdb, "b")
	rdb.Del(ctx, fenceKey)
	rdb.HSet(ctx, fenceKey, "field", "value")
	if n := release(t, ctx, rdb, tok("a")); n != 1 {
		t.Fatalf("release with a foreign fencing counter: %d, want 1", n)
	}
	expectWord(t, messages, "c1 0b")
	if n, _ := rdb.Exists(ctx, lockKey).Result(); n != 0 {
		t.Fatal("the lock was handed over without a fencing token")
	}
}

// A copy of an attempt of a call that gave up, finding the lock handed to
// that call (a late copy of an earlier attempt had registered it again
// after its abandon withdrew the registrations it knew of), must not
// report it granted to nobody: it lets the lock go.
func TestMutexAcquire_CopyFindingItsGoneCallHoldingLetsGo(t *testing.T) {
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, tok("a"))
	queueWaiter(t, ctx, rdb, "b")
	if n := abandon(t, ctx, rdb, tok("b"), ""); n != 0 { // the call gives up; its registration is left behind
		t.Fatalf("abandon: %d, want 0", n)
	}
	release(t, ctx, rdb, tok("a")) // hands the lock to the stale registration
	if holder, _ := rdb.Get(ctx, lockKey).Result(); holder != tok("b") {
		t.Fatalf("the release handed the lock to %q; the test needs the stale registration to get it", holder)
	}
	if res := acquire(t, ctx, rdb, tok("b")); res[0] != -1 {
		t.Fatalf("a copy of the gone call's attempt: %v, want {-1, 0}", res)
	}
	if n, _ := rdb.Exists(ctx, lockKey).Result(); n != 0 {
		t.Fatal("the lock is still held for a call that gave up")
	}
}

// A Redlock's release names no holder info, mark or token: it reads the
// lock alone, and still refuses one of another type, leaving it.
func TestMutexRelease_ARedlocksReleaseReadsTheLockAlone(t *testing.T) {
	ctx, rdb := setup(t)
	keys := []string{lockKey, channel, waitersKey, fenceKey}
	acquire(t, ctx, rdb, tok("a"))
	if n := runInt(t, ctx, rdb, MutexRelease, keys, tok("a"), "PUBLISH"); n != 1 || rdb.Exists(ctx, lockKey).Val() != 0 {
		t.Fatalf("release of a hold: %d; want 1, the lock gone", n)
	}
	if n := runInt(t, ctx, rdb, MutexRelease, keys, tok("a"), "PUBLISH"); n != 0 {
		t.Fatalf("release of a lock gone: %d; want 0", n)
	}
	rdb.HSet(ctx, lockKey, "f", "v")
	err := MutexRelease.Run(ctx, rdb, keys, tok("a"), "PUBLISH").Err()
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || rdb.HGet(ctx, lockKey, "f").Val() != "v" {
		t.Fatalf("release of a hash: %v; want WRONGTYPE, the hash left", err)
	}
}
