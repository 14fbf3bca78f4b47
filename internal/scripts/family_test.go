package scripts

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The contracts of the FairMutex, Semaphore and MultiLock scripts: sent
// twice, arriving late, and what their releases hand on.

var (
	fairKeys = []string{lockKey, fenceKey, "t:{m}:queue", waitersKey, channel, "t:{m}:holder"}
	semKeys  = []string{"t:{m}", "t:{m}:tokens", "t:{m}:permits", waitersKey, channel, fenceKey}
	// an acquire's: all but the channel
	semAcquireKeys = []string{"t:{m}", "t:{m}:tokens", "t:{m}:permits", waitersKey, fenceKey}
)

// with is keys and the tombstone of owner.
func with(keys []string, owner string) []string {
	return append(keys[:len(keys):len(keys)], "t:{m}:void:"+owner)
}

// argvOf is args' ARGV followed by an acquire's rights flag, as a Client
// sends them ("": the rights checked).
func argvOf(args Args, rights string) []any { return append(args.Append(nil), rights) }

// acq is owner's attempt at a hold of ttl ms, registering waiter ("":
// none) for 3 s when refused.
func acq(owner string, ttl int, waiter string) Acquire {
	return Acquire{Owner: owner, TTL: ttl, Waiter: waiter, WaiterTTL: 3000}
}

func run(t *testing.T, ctx context.Context, rdb *redis.Client, s *redis.Script, keys []string, args ...any) []int64 {
	t.Helper()
	res, err := AcquireReply(s.Run(ctx, rdb, keys, args...))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func runInt(t *testing.T, ctx context.Context, rdb *redis.Client, s *redis.Script, keys []string, args ...any) int64 {
	t.Helper()
	n, err := s.Run(ctx, rdb, keys, args...).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Fair owners are 32 hex digits, as the queue entries require.
const (
	fairA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	fairB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	fairC = "cccccccccccccccccccccccccccccccc"
)

func fairTry(t *testing.T, ctx context.Context, rdb *redis.Client, owner, waiter string) []int64 {
	t.Helper()
	return run(t, ctx, rdb, FairAcquire, with(fairKeys, owner), argvOf(FairAcquireArgs{Publish: "PUBLISH", Acquire: acq(owner, 10000, waiter)}, "")...)
}

// A waiter queued with its client's tag is told its token and how long the
// hand-over holds, on its client's channel: a token above the counter its
// attempt read.
func TestFairRelease_TellsATaggedWaiterItsHoldOnItsClientsChannel(t *testing.T) {
	ctx, rdb := setup(t)
	messages := listen(t, ctx, rdb)
	held := fairTry(t, ctx, rdb, fairA, "")
	refused := fairTry(t, ctx, rdb, fairB, "c1/0b")
	if len(refused) != 3 || refused[0] != 0 || refused[2] != held[1] {
		t.Fatalf("a queued waiter's refusal: %v, want {0, ms left, %d: the counter}", refused, held[1])
	}
	if n := runInt(t, ctx, rdb, FairRelease, fairKeys, fairA, "PUBLISH"); n != 1 {
		t.Fatalf("release: %d, want 1", n)
	}
	got := nextMessage(t, messages)
	token, granted, _ := strings.Cut(strings.TrimPrefix(got, "c1 0b:"), ":")
	fence, err1 := strconv.ParseInt(token, 10, 64)
	px, err2 := strconv.Atoi(granted)
	if !strings.HasPrefix(got, "c1 0b:") || err1 != nil || fence <= refused[2] || err2 != nil || px <= 0 || px > 3000 {
		t.Fatalf("published %q, want \"0b:\", a token above %d and the ms granted on c1's channel", got, refused[2])
	}
	if holder, _ := rdb.Get(ctx, lockKey).Result(); holder != fairB {
		t.Fatalf("handed to %q, want the waiter", holder)
	}
}

func TestFairRelease_HandsOverToTheFirstLiveWaiter(t *testing.T) {
	ctx, rdb := setup(t)
	held := fairTry(t, ctx, rdb, fairA, "")
	expectRefused(t, fairTry(t, ctx, rdb, fairB, "wb"), "first waiter")
	expectRefused(t, fairTry(t, ctx, rdb, fairC, "wc"), "second waiter")
	// The first waiter's place runs out, as if it had died.
	if err := rdb.ZAddXX(ctx, waitersKey, redis.Z{Score: 1, Member: fairB + "wb"}).Err(); err != nil {
		t.Fatal(err)
	}
	messages := listen(t, ctx, rdb)
	if n := runInt(t, ctx, rdb, FairRelease, fairKeys, fairA, "PUBLISH"); n != 1 {
		t.Fatalf("release: %d, want 1", n)
	}
	expectWord(t, messages, "wc")
	if holder, _ := rdb.Get(ctx, lockKey).Result(); holder != fairC {
		t.Fatalf("handed to %q, want the live waiter", holder)
	}
	if ttl := rdb.PTTL(ctx, lockKey).Val(); ttl <= 0 || ttl.Milliseconds() > 3000 {
		t.Fatalf("a hand-over held for %v, want no longer than the waiter's place (3s)", ttl)
	}
	if n := rdb.ZCard(ctx, "t:{m}:queue").Val(); n != 0 {
		t.Fatalf("%d left in line", n)
	}
	if got, minted := expectGranted(t, fairTry(t, ctx, rdb, fairC, "wc"), "the woken waiter"), rdb.Get(ctx, fenceKey).Val(); strconv.FormatInt(got, 10) != minted || got <= held[1] {
		t.Fatalf("the hand-over's token %d, want the one minted at the hand-over (%s), above %d", got, minted, held[1])
	}
	if ttl := rdb.PTTL(ctx, lockKey).Val(); ttl.Milliseconds() <= 3000 {
		t.Fatalf("taken up with %v left, want its own TTL", ttl)
	}
}

func TestFairAcquire_ArrivingAfterItsAbandonIsRefused(t *testing.T) {
	ctx, rdb := setup(t)
	fairTry(t, ctx, rdb, fairA, "")
	if n := runInt(t, ctx, rdb, FairAbandon, with(fairKeys, fairB), fairB, "PUBLISH", "wb"); n != 0 {
		t.Fatalf("abandon before arrival: %d, want 0", n)
	}
	if res := fairTry(t, ctx, rdb, fairB, "wb"); res[0] != -1 {
		t.Fatalf("late queueing attempt: %v, want {-1, 0}", res)
	}
	if n := rdb.ZCard(ctx, "t:{m}:queue").Val(); n != 0 {
		t.Fatalf("a refused late attempt left %d in line", n)
	}
}

func semTry(t *testing.T, ctx context.Context, rdb *redis.Client, owner string, permits int) []int64 {
	t.Helper()
	return run(t, ctx, rdb, SemAcquire, with(semAcquireKeys, owner), argvOf(SemAcquireArgs{Permits: permits, Acquire: acq(owner, 10000, "")}, "")...)
}

func TestSemAcquire_ResentAcquireCountsOnce(t *testing.T) {
	ctx, rdb := setup(t)
	first := semTry(t, ctx, rdb, tok("a"), 2)
	again := semTry(t, ctx, rdb, tok("a"), 2)
	if first[0] != 1 || again[0] != 1 || again[1] != first[1] {
		t.Fatalf("first %v, resend %v: want both acquired with the same token", first, again)
	}
	if n := rdb.ZCard(ctx, "t:{m}").Val(); n != 1 {
		t.Fatalf("%d permits held after a resent acquire, want 1", n)
	}
	expectGranted(t, semTry(t, ctx, rdb, tok("b"), 2), "the second permit")
	expectRefused(t, semTry(t, ctx, rdb, tok("c"), 2), "a third of two")
}

// Every attempt of one call sends the call's owner: a copy of a refused,
// registered attempt arriving after a later one was granted reports that
// permit, takes no second one and registers nothing.
func TestSemAcquire_CopyOfARefusalArrivingOnceGrantedCountsOnce(t *testing.T) {
	ctx, rdb := setup(t)
	semTry(t, ctx, rdb, tok("a"), 2)
	semTry(t, ctx, rdb, tok("b"), 2)
	try := func() []int64 {
		return run(t, ctx, rdb, SemAcquire, with(semAcquireKeys, tok("c")), argvOf(SemAcquireArgs{Permits: 2, Acquire: acq(tok("c"), 10000, "waiter")}, "")...)
	}
	expectRefused(t, try(), "a third of two")
	runInt(t, ctx, rdb, SemRelease, semKeys[:5], tok("a"), "PUBLISH")
	token := expectGranted(t, try(), "the third once a permit is free")
	runInt(t, ctx, rdb, SemRelease, semKeys[:5], tok("b"), "PUBLISH")
	if again := expectGranted(t, try(), "the copy of the refusal"); again != token {
		t.Fatalf("the copy got token %d, the call %d", again, token)
	}
	if n := rdb.ZCard(ctx, "t:{m}").Val(); n != 1 {
		t.Fatalf("%d permits held after the copy, want 1", n)
	}
	if n := rdb.Exists(ctx, waitersKey).Val(); n != 0 {
		t.Fatal("the copy registered the waiter again")
	}
}

func TestSemRelease_SentTwiceGivesBackOnePermit(t *testing.T) {
	ctx, rdb := setup(t)
	semTry(t, ctx, rdb, tok("a"), 2)
	semTry(t, ctx, rdb, tok("b"), 2)
	for i, want := range []int64{1, 0} {
		if n := runInt(t, ctx, rdb, SemRelease, semKeys[:5], tok("a"), "PUBLISH"); n != want {
			t.Fatalf("release %d: %d, want %d", i+1, n, want)
		}
	}
	if n := rdb.ZCard(ctx, "t:{m}").Val(); n != 1 {
		t.Fatalf("%d permits held, want owner-b's alone", n)
	}
}

func TestSemExtend_NeverBringsBackAnExpiredPermit(t *testing.T) {
	ctx, rdb := setup(t)
	semTry(t, ctx, rdb, tok("a"), 1)
	if err := rdb.ZAddXX(ctx, "t:{m}", redis.Z{Score: 1, Member: tok("a")}).Err(); err != nil {
		t.Fatal(err)
	}
	if n := runInt(t, ctx, rdb, SemExtend, semKeys[:3], tok("a"), 10000); n != 0 {
		t.Fatalf("extend of an expired permit: %d, want 0", n)
	}
	expectGranted(t, semTry(t, ctx, rdb, tok("b"), 1), "the expired permit, taken by another")
}

func TestSemAcquire_ArrivingAfterItsAbandonIsRefused(t *testing.T) {
	ctx, rdb := setup(t)
	if n := runInt(t, ctx, rdb, SemAbandon, with(semKeys, tok("a")), tok("a"), "PUBLISH", ""); n != 0 {
		t.Fatalf("abandon before arrival: %d, want 0", n)
	}
	if res := semTry(t, ctx, rdb, tok("a"), 1); res[0] != -1 {
		t.Fatalf("late acquire: %v, want {-1, 0}", res)
	}
	if n := rdb.Exists(ctx, "t:{m}").Val(); n != 0 {
		t.Fatal("a refused late acquire holds a permit")
	}
}

// Two locks of one MultiLock group, four keys each.
var multiKeys = []string{ // key by key (see partLocals)
	"t:{m}", "t:{n}", "t:{m}:fence", "t:{n}:fence",
	"t:{m}:waiters", "t:{n}:waiters", "t:{m}:wake", "t:{n}:wake",
}

func multiTry(t *testing.T, ctx context.Context, rdb *redis.Client, owner, waiter string, watch int) []int64 {
	t.Helper()
	return run(t, ctx, rdb, MultiAcquire, with(multiKeys, owner), argvOf(MultiAcquireArgs{Publish: "PUBLISH", Acquire: acq(owner, 10000, waiter), Watch: watch}, "")...)
}

func TestMultiAcquire_ResentAcquireCountsOnce(t *testing.T) {
	ctx, rdb := setup(t)
	first := multiTry(t, ctx, rdb, tok("a"), "", 1)
	again := multiTry(t, ctx, rdb, tok("a"), "", 1)
	if len(first) != 3 || first[0] != 1 || len(again) != 3 || again[1] != first[1] || again[2] != first[2] {
		t.Fatalf("first %v, resend %v: want both acquired with the same tokens", first, again)
	}
	for i, fence := range []string{"t:{m}:fence", "t:{n}:fence"} {
		if n, _ := rdb.Get(ctx, fence).Int64(); n != first[i+1] {
			t.Fatalf("%s at %d after a resent acquire, want %d", fence, n, first[i+1])
		}
	}
}

func TestMultiAcquire_TakesNoneWhileOneIsHeld(t *testing.T) {
	ctx, rdb := setup(t)
	rdb.Set(ctx, "t:{n}", tok("e"), 0) // someone else
	res := multiTry(t, ctx, rdb, tok("a"), "w", 1)
	if res[0] != 0 || res[2] != 2 {
		t.Fatalf("with the second lock held: %v, want refused by lock 2", res)
	}
	if n := rdb.Exists(ctx, "t:{m}").Val(); n != 0 {
		t.Fatal("the free lock was taken though the other is held")
	}
	// It listened on lock 1: told lock 2 is in its way, it did not register.
	if n := rdb.Exists(ctx, "t:{m}:waiters", "t:{n}:waiters").Val(); n != 0 {
		t.Fatal("registered on a lock it does not listen on")
	}
	expectRefused(t, multiTry(t, ctx, rdb, tok("a"), "w", 2), "listening on lock 2")
	if n := rdb.ZCard(ctx, "t:{n}:waiters").Val(); n != 1 {
		t.Fatal("not registered on the lock it listens on and waits for")
	}
}

func TestMultiRelease_ReleasesWhatIsLeftWhenOneWasLost(t *testing.T) {
	ctx, rdb := setup(t)
	multiTry(t, ctx, rdb, tok("a"), "", 1)
	rdb.Set(ctx, "t:{n}", "someone", 0) // taken from it
	if n := runInt(t, ctx, rdb, MultiExtend, multiKeys, tok("a"), 10000); n != 0 {
		t.Fatalf("extend with one lock lost: %d, want 0", n)
	}
	if n := runInt(t, ctx, rdb, MultiRelease, multiKeys, tok("a"), "PUBLISH"); n != 0 {
		t.Fatalf("release with one lock lost: %d, want 0", n)
	}
	if n := rdb.Exists(ctx, "t:{m}").Val(); n != 0 {
		t.Fatal("the lock still held was not released")
	}
	if holder := rdb.Get(ctx, "t:{n}").Val(); holder != "someone" {
		t.Fatal("the release touched the other owner's lock")
	}
}

// A group whose hold lapsed, was another's, and was taken again for its
// owner by a late copy of the attempt that granted it: the release lets it
// go, but says the hold did not last (the copy minted above the lease's
// tokens), and leaves no mark that a resend would read as a release.
func TestMultiRelease_OfAGroupRetakenSinceItsGrantLetsGoAndAnswers0(t *testing.T) {
	ctx, rdb := setup(t)
	mark := append(multiKeys[:len(multiKeys):len(multiKeys)], "t:{m}:released:a")
	granted := multiTry(t, ctx, rdb, tok("a"), "", 1)
	rdb.Del(ctx, "t:{m}", "t:{n}") // lapsed
	multiTry(t, ctx, rdb, tok("e"), "", 1)
	if n := runInt(t, ctx, rdb, MultiRelease, multiKeys, tok("e"), "PUBLISH"); n != 1 {
		t.Fatalf("the other owner's release: %d, want 1", n)
	}
	if res := multiTry(t, ctx, rdb, tok("a"), "", 1); res[0] != 1 {
		t.Fatalf("the late copy: %v, want it to take the free group", res)
	}
	if n := runInt(t, ctx, rdb, MultiRelease, mark, tok("a"), "PUBLISH", granted[1], granted[2]); n != 0 {
		t.Fatalf("release of a group retaken since its grant: %d, want 0", n)
	}
	if n := rdb.Exists(ctx, "t:{m}", "t:{n}", "t:{m}:released:a").Val(); n != 0 {
		t.Fatalf("%d of the locks and the mark left, want none", n)
	}

	// A hold that lasted since its grant, resent included, answers 1.
	granted = multiTry(t, ctx, rdb, tok("b"), "", 1)
	multiTry(t, ctx, rdb, tok("b"), "", 1)
	if n := runInt(t, ctx, rdb, MultiRelease, mark, tok("b"), "PUBLISH", granted[1], granted[2]); n != 1 {
		t.Fatalf("release of a group held since its grant: %d, want 1", n)
	}
}

func TestMultiAcquire_ArrivingAfterItsAbandonIsRefused(t *testing.T) {
	ctx, rdb := setup(t)
	if n := runInt(t, ctx, rdb, MultiAbandon, with(multiKeys, tok("a")), tok("a"), "PUBLISH", "", 1); n != 0 {
		t.Fatalf("abandon before arrival: %d, want 0", n)
	}
	if res := multiTry(t, ctx, rdb, tok("a"), "", 1); res[0] != -1 {
		t.Fatalf("late acquire: %v, want {-1, 0}", res)
	}
	if n := rdb.Exists(ctx, "t:{m}", "t:{n}").Val(); n != 0 {
		t.Fatal("a refused late acquire holds locks")
	}
}

// A copy of an attempt that took a group arrives once one of its locks was
// lost (deleted, evicted, removed by force) and is held by another owner:
// the lock in place is the call's, the group is not. The copy must neither
// report the group acquired nor lengthen the other owner's hold.
func TestMultiAcquire_ResendWithALockTakenByAnotherIsRefusedAndTouchesIt(t *testing.T) {
	ctx, rdb := setup(t)
	expectGranted(t, multiTry(t, ctx, rdb, tok("a"), "", 1), "the group")
	rdb.Set(ctx, "t:{n}", tok("e"), 2*time.Second) // lost, then taken by e for 2 s
	res := multiTry(t, ctx, rdb, tok("a"), "", 1)
	if res[0] == 1 {
		t.Errorf("resend with lock 2 held by another: %v, want refused", res)
	}
	if holder := rdb.Get(ctx, "t:{n}").Val(); holder != tok("e") {
		t.Errorf("lock 2 holds %q, want the other owner's", holder)
	}
	if left := rdb.PTTL(ctx, "t:{n}").Val(); left > 2*time.Second {
		t.Errorf("the other owner's hold has %v left, want no more than its own 2 s", left)
	}
}

// The same with a value dlock did not write where the lost lock was: the
// copy fails with WRONGTYPE, changing nothing, and leaves the value with no
// expiry, as it found it.
func TestMultiAcquire_ResendWithAForeignValueWhereALockWasLeavesItUntouched(t *testing.T) {
	ctx, rdb := setup(t)
	expectGranted(t, multiTry(t, ctx, rdb, tok("a"), "", 1), "the group")
	rdb.Set(ctx, "t:{n}", "user data", 0)
	_, err := AcquireReply(MultiAcquire.Run(ctx, rdb, with(multiKeys, tok("a")), argvOf(MultiAcquireArgs{Publish: "PUBLISH", Acquire: acq(tok("a"), 10000, ""), Watch: 1}, "")...))
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("resend with a foreign value at lock 2: %v, want WRONGTYPE", err)
	}
	if left := rdb.PTTL(ctx, "t:{n}").Val(); left != -1 {
		t.Errorf("the foreign value was given an expiry (%v left): it would be deleted", left)
	}
}

// A lock of the group deleted (evicted, flushed): a copy finding the rest
// its own takes the group anew, rather than report a lock held that
// anyone can take.
func TestMultiAcquire_ResendWithALockGoneTakesItAgain(t *testing.T) {
	ctx, rdb := setup(t)
	expectGranted(t, multiTry(t, ctx, rdb, tok("a"), "", 1), "the group")
	rdb.Del(ctx, "t:{n}")
	expectGranted(t, multiTry(t, ctx, rdb, tok("a"), "", 1), "the group with lock 2 gone")
	if holder := rdb.Get(ctx, "t:{n}").Val(); holder != tok("a") {
		t.Errorf("granted with lock 2 holding %q, want the call's owner token", holder)
	}
}

// A queueing attempt that finds the registrations of another type (with a
// TTL, so only the ZADD's error tells) takes back the queue entry it just
// added: the attempt fails with WRONGTYPE and changes nothing.
func TestFairAcquire_QueueingIntoForeignRegistrationsTakesItsEntryBack(t *testing.T) {
	ctx, rdb := setup(t)
	fairTry(t, ctx, rdb, fairA, "")
	rdb.Set(ctx, "t:{m}:waiters", "their-data", time.Hour)
	if _, err := FairAcquire.Run(ctx, rdb, with(fairKeys, fairB), argvOf(FairAcquireArgs{Publish: "PUBLISH", Acquire: acq(fairB, 10000, "wb")}, "")...).Result(); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("queueing: %v; want WRONGTYPE", err)
	}
	if n := rdb.Exists(ctx, "t:{m}:queue").Val(); n != 0 {
		t.Fatal("the refused attempt left its entry in the queue")
	}
	if v := rdb.Get(ctx, "t:{m}:waiters").Val(); v != "their-data" {
		t.Fatalf("the foreign value is now %q", v)
	}
}

// An attempt that finds the lock already its own (a resend of the granting
// attempt, or a waiter's attempt after a hand-over) beside a fencing
// counter another program replaced with a word fails with WRONGTYPE and
// changes nothing: the hold keeps the TTL it had left, not the attempt's.
func TestFairAcquire_FindingItsOwnHoldBesideAForeignCounterChangesNothing(t *testing.T) {
	for _, waiter := range []string{"", "c1/wa"} {
		ctx, rdb := setup(t)
		expectGranted(t, fairTry(t, ctx, rdb, fairA, ""), "first attempt")
		rdb.PExpire(ctx, lockKey, 2*time.Second) // most of the hold has gone by
		rdb.Set(ctx, fenceKey, "their-data", 0)
		_, err := FairAcquire.Run(ctx, rdb, with(fairKeys, fairA), argvOf(FairAcquireArgs{Publish: "PUBLISH", Acquire: acq(fairA, 10000, waiter)}, "")...).Result()
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), fenceKey) {
			t.Errorf("waiter %q: the attempt again: %v; want WRONGTYPE naming the counter", waiter, err)
		}
		if ttl := rdb.PTTL(ctx, lockKey).Val(); ttl > 2*time.Second {
			t.Errorf("waiter %q: a refused attempt made the hold last %v, want at most the 2s it had", waiter, ttl)
		}
		if v := rdb.Get(ctx, fenceKey).Val(); v != "their-data" {
			t.Errorf("waiter %q: the counter is now %q", waiter, v)
		}
	}
}

// A late copy of an attempt of a call that gave up finds a value under the
// call's tombstone: whatever its type, it refuses itself (-1), taking no
// permit and registering nothing, beside a stored number of permits as
// where none is stored. (ae4f088 read a tombstone of another type as a
// tombstone only where the number of permits was missing.)
func TestSemAcquire_ATombstoneOfAnotherTypeRefusesALateCopyBesideTheNumber(t *testing.T) {
	ctx, rdb := setup(t)
	for _, waiter := range []string{"", "waiter"} {
		if err := rdb.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		permits := 2
		if waiter != "" {
			permits = 1 // all held: the copy would register
		}
		expectGranted(t, semTry(t, ctx, rdb, tok("a"), permits), "the holder beside")
		if err := rdb.HSet(ctx, "t:{m}:void:"+tok("b"), "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		got, err := AcquireReply(SemAcquire.Run(ctx, rdb, with(semAcquireKeys, tok("b")), argvOf(SemAcquireArgs{Permits: permits, Acquire: acq(tok("b"), 10000, waiter)}, "")...))
		if err == nil && (len(got) != 2 || got[0] != -1) {
			t.Errorf("waiter %q: a late copy beside a tombstone of another type: %v, want [-1 0] (or WRONGTYPE)", waiter, got)
		}
		if rdb.ZScore(ctx, "t:{m}", tok("b")).Err() == nil {
			t.Errorf("waiter %q: the late copy took a permit", waiter)
		}
		if rdb.ZScore(ctx, waitersKey, waiter).Err() == nil {
			t.Errorf("waiter %q: the late copy registered", waiter)
		}
	}
}

// An acquire that finds all permits held, no number of permits stored
// (lost: evicted, deleted) and a value of another program, with a TTL,
// under the waiters' key, writes nothing: it fails with WRONGTYPE or is
// refused, but stores no number beside the foreign key.
func TestSemAcquire_ARefusalBesideForeignWaitersWritesNothing(t *testing.T) {
	ctx, rdb := setup(t)
	expectGranted(t, semTry(t, ctx, rdb, tok("a"), 1), "the holder")
	if err := rdb.Del(ctx, "t:{m}:permits").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, waitersKey, "their-data", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := AcquireReply(SemAcquire.Run(ctx, rdb, with(semAcquireKeys, tok("b")), argvOf(SemAcquireArgs{Permits: 1, Acquire: acq(tok("b"), 10000, "")}, "")...))
	if n := rdb.Exists(ctx, "t:{m}:permits").Val(); n != 0 {
		t.Errorf("the acquire (%v, %v) beside a foreign waiters' key wrote the number of permits", got, err)
	}
	if v := rdb.Get(ctx, waitersKey).Val(); v != "their-data" {
		t.Errorf("the foreign value is now %q", v)
	}
}
