package scripts

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The RWMutex scripts' contracts (ReentrantMutex uses the write side).

const (
	rwState, rwHolds, rwWriters, rwPass, rwWake, rwReadWake, rwFence = "t:{rw}", "t:{rw}:holds",
		"t:{rw}:waiters", "t:{rw}:rpass", "t:{rw}:wake", "t:{rw}:rwake", "t:{rw}:fence"
)

// rwKeys are the KEYS of rw_lib.lua, up to the fencing counter.
var rwKeys = []string{rwState, rwHolds, rwWriters, "t:{rw}:rwaiters", rwPass, rwWake, rwReadWake, rwFence}

// withTombstone is rwKeys and the tombstone of a hold id.
func withTombstone(holdID string) []string {
	return append(rwKeys[:len(rwKeys):len(rwKeys)], "t:{rw}:void:"+holdID)
}

// hold makes the member of one hold: mode, a 32-character hold id, owner.
func hold(mode, id, owner string) string {
	return mode + (id + strings.Repeat("0", 32))[:32] + owner
}

func tryRW(t *testing.T, ctx context.Context, rdb *redis.Client, member, waiter string) []int64 {
	t.Helper()
	res, err := AcquireReply(RWAcquire.Run(ctx, rdb, withTombstone(member[1:33]), argvOf(RWAcquireArgs{Acquire: acq(member, 10000, waiter)}, "")...))
	if err != nil {
		t.Fatalf("acquire %s: %v", member, err)
	}
	return res
}

func releaseRW(t *testing.T, ctx context.Context, rdb *redis.Client, member string) int64 {
	t.Helper()
	n, err := RWRelease.Run(ctx, rdb, rwKeys[:7], member, "PUBLISH").Int64()
	if err != nil {
		t.Fatalf("release %s: %v", member, err)
	}
	return n
}

func abandonRW(t *testing.T, ctx context.Context, rdb *redis.Client, member, waiter string) int64 {
	t.Helper()
	holdID := ""
	if member != "" {
		holdID = member[1:33]
	}
	n, err := RWAbandon.Run(ctx, rdb, withTombstone(holdID), member, "PUBLISH", waiter).Int64()
	if err != nil {
		t.Fatalf("abandon %s: %v", member, err)
	}
	return n
}

// expire makes a hold's expiry pass, as if its holder had crashed a TTL ago.
func expire(t *testing.T, ctx context.Context, rdb *redis.Client, member string) {
	t.Helper()
	if err := rdb.ZAddXX(ctx, rwHolds, redis.Z{Score: 1, Member: member}).Err(); err != nil {
		t.Fatal(err)
	}
}

func expectGranted(t *testing.T, res []int64, what string) int64 {
	t.Helper()
	if res[0] != 1 {
		t.Fatalf("%s: %v, want granted", what, res)
	}
	return res[1]
}

func expectRefused(t *testing.T, res []int64, what string) {
	t.Helper()
	if res[0] != 0 {
		t.Fatalf("%s: %v, want refused", what, res)
	}
}

func listenOn(t *testing.T, ctx context.Context, rdb *redis.Client, ch string) <-chan *redis.Message {
	t.Helper()
	ps := rdb.Subscribe(ctx, ch)
	t.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	return ps.Channel()
}

func TestRWAcquire_ResentAcquireCountsOnce(t *testing.T) {
	ctx, rdb := setup(t)
	a := hold("w", "1", "alice")
	first := expectGranted(t, tryRW(t, ctx, rdb, a, ""), "acquire")
	again := expectGranted(t, tryRW(t, ctx, rdb, a, ""), "the same acquire resent")
	if first != again {
		t.Fatalf("resend got token %d, first %d", again, first)
	}
	if n, _ := rdb.HGet(ctx, rwState, "nwalice").Int(); n != 1 {
		t.Fatalf("hold count %d after a resent acquire, want 1", n)
	}
	if n, _ := rdb.Get(ctx, rwFence).Int64(); n != first {
		t.Fatalf("fencing counter %d, want %d", n, first)
	}
}

// Every attempt of one call sends the call's hold: a copy of a refused,
// registered attempt arriving after a later one was granted reports that
// hold, counts nothing twice and registers nothing.
func TestRWAcquire_CopyOfARefusalArrivingOnceGrantedCountsOnce(t *testing.T) {
	ctx, rdb := setup(t)
	writer := expectGranted(t, tryRW(t, ctx, rdb, hold("w", "1", "bob"), ""), "the writer")
	reader := hold("r", "2", "alice")
	expectRefused(t, tryRW(t, ctx, rdb, reader, "waiter"), "a reader while bob writes")
	releaseRW(t, ctx, rdb, hold("w", "1", "bob"))
	token := expectGranted(t, tryRW(t, ctx, rdb, reader, "waiter"), "the reader once bob left")
	if token == writer {
		t.Fatalf("the reader got the writer's token %d", token)
	}
	if again := expectGranted(t, tryRW(t, ctx, rdb, reader, "waiter"), "the copy of the refusal"); again != token {
		t.Fatalf("the copy got token %d, the call %d", again, token)
	}
	if n, _ := rdb.HGet(ctx, rwState, "R").Int(); n != 1 {
		t.Fatalf("%d read holds after the copy, want 1", n)
	}
	if n := rdb.Exists(ctx, "t:{rw}:rwaiters", rwPass).Val(); n != 0 {
		t.Fatal("the copy registered the reader again")
	}
	releaseRW(t, ctx, rdb, reader)
	if n := rdb.Exists(ctx, rwState, rwHolds).Val(); n != 0 {
		t.Fatal("a hold is left after the call's release")
	}
}

func TestRWAcquire_ReentryCountsAndSharesTheToken(t *testing.T) {
	ctx, rdb := setup(t)
	first := expectGranted(t, tryRW(t, ctx, rdb, hold("w", "1", "alice"), ""), "acquire")
	second := expectGranted(t, tryRW(t, ctx, rdb, hold("w", "2", "alice"), ""), "re-entry")
	if first != second {
		t.Fatalf("re-entry token %d, want the first hold's %d", second, first)
	}
	expectRefused(t, tryRW(t, ctx, rdb, hold("w", "3", "bob"), ""), "another owner")
	if n, _ := rdb.HGet(ctx, rwState, "nwalice").Int(); n != 2 {
		t.Fatalf("hold count %d, want 2", n)
	}
}

func TestRWRelease_TakesAwayOneHoldOnce(t *testing.T) {
	ctx, rdb := setup(t)
	a1, a2 := hold("w", "1", "alice"), hold("w", "2", "alice")
	tryRW(t, ctx, rdb, a1, "")
	tryRW(t, ctx, rdb, a2, "")
	if n := releaseRW(t, ctx, rdb, a1); n != 1 {
		t.Fatalf("release: %d, want 1", n)
	}
	if n := releaseRW(t, ctx, rdb, a1); n != 0 {
		t.Fatalf("the same release resent: %d, want 0", n)
	}
	if n, _ := rdb.HGet(ctx, rwState, "nwalice").Int(); n != 1 {
		t.Fatalf("hold count %d after a resent release, want 1", n)
	}
	releaseRW(t, ctx, rdb, a2)
	if n, _ := rdb.Exists(ctx, rwState, rwHolds).Result(); n != 0 {
		t.Fatal("the lock's keys outlived its last hold")
	}
}

func TestRWRelease_ForeignMemberChangesNothing(t *testing.T) {
	ctx, rdb := setup(t)
	tryRW(t, ctx, rdb, hold("w", "1", "alice"), "")
	before, _ := rdb.ZRangeWithScores(ctx, rwHolds, 0, -1).Result()
	for _, forged := range []string{hold("w", "1", "bob"), hold("w", "2", "alice"), hold("r", "1", "alice")} {
		if n := releaseRW(t, ctx, rdb, forged); n != 0 {
			t.Fatalf("release of %q: %d, want 0", forged, n)
		}
	}
	after, _ := rdb.ZRangeWithScores(ctx, rwHolds, 0, -1).Result()
	if len(after) != 1 || after[0] != before[0] {
		t.Fatalf("holds changed from %v to %v", before, after)
	}
}

func TestRWExtend_NeverBringsBackAnExpiredHold(t *testing.T) {
	ctx, rdb := setup(t)
	a := hold("r", "1", "alice")
	tryRW(t, ctx, rdb, a, "")
	expire(t, ctx, rdb, a)
	n, err := RWExtend.Run(ctx, rdb, rwKeys[:2], a, 10000).Int64()
	if err != nil || n != 0 {
		t.Fatalf("extend of an expired hold: %d, %v; want 0", n, err)
	}
	if ms, _ := RWTTL.Run(ctx, rdb, rwKeys[:2], a).Int64(); ms != -3 {
		t.Fatalf("TTL of an expired hold: %d, want -3", ms)
	}
}

func TestRWAcquire_ExpiredHoldsNoLongerBlock(t *testing.T) {
	ctx, rdb := setup(t)
	r1, r2 := hold("r", "1", "alice"), hold("r", "2", "bob")
	tryRW(t, ctx, rdb, r1, "")
	tryRW(t, ctx, rdb, r2, "")
	expectRefused(t, tryRW(t, ctx, rdb, hold("w", "3", "carol"), ""), "write while two read")
	expire(t, ctx, rdb, r1)
	expectRefused(t, tryRW(t, ctx, rdb, hold("w", "3", "carol"), ""), "write while one reads")
	if n, _ := rdb.HGet(ctx, rwState, "R").Int(); n != 1 {
		t.Fatalf("read holds counted %d after one expired, want 1", n)
	}
	expire(t, ctx, rdb, r2)
	expectGranted(t, tryRW(t, ctx, rdb, hold("w", "3", "carol"), ""), "write once both reads expired")
}

func TestRWAcquire_UpgradeIsRefusedDowngradeAllowed(t *testing.T) {
	ctx, rdb := setup(t)
	tryRW(t, ctx, rdb, hold("r", "1", "alice"), "")
	if res := tryRW(t, ctx, rdb, hold("w", "2", "alice"), "waiter"); res[0] != -2 {
		t.Fatalf("write by an owner holding only reads: %v, want {-2, 0}", res)
	}
	if n, _ := rdb.Exists(ctx, rwWriters).Result(); n != 0 {
		t.Fatal("a refused upgrade registered as a waiting writer")
	}

	w := hold("w", "3", "bob")
	releaseRW(t, ctx, rdb, hold("r", "1", "alice"))
	expectGranted(t, tryRW(t, ctx, rdb, w, ""), "write")
	expectGranted(t, tryRW(t, ctx, rdb, hold("r", "4", "bob"), ""), "read by the writer")
	expectRefused(t, tryRW(t, ctx, rdb, hold("r", "5", "carol"), ""), "read by another owner while bob writes")
	releaseRW(t, ctx, rdb, w)
	expectGranted(t, tryRW(t, ctx, rdb, hold("r", "5", "carol"), ""), "read once bob only reads")
	expectRefused(t, tryRW(t, ctx, rdb, hold("w", "6", "dave"), ""), "write while bob still reads")
}

func TestRWAcquire_WaitingWriterHoldsNewReadersBack(t *testing.T) {
	ctx, rdb := setup(t)
	tryRW(t, ctx, rdb, hold("r", "1", "alice"), "")
	expectRefused(t, tryRW(t, ctx, rdb, hold("w", "2", "bob"), "writer-bob"), "write while alice reads")
	expectRefused(t, tryRW(t, ctx, rdb, hold("r", "3", "carol"), ""), "a new reader while bob waits")
	expectGranted(t, tryRW(t, ctx, rdb, hold("r", "4", "alice"), ""), "alice re-entering while bob waits")

	// A writer whose registration ran out (it died waiting) holds no one back.
	rdb.ZAddXX(ctx, rwWriters, redis.Z{Score: 1, Member: "writer-bob"})
	expectGranted(t, tryRW(t, ctx, rdb, hold("r", "3", "carol"), ""), "a new reader once bob's registration expired")
}

func TestRWRelease_WriterLeavingPassesWaitingReadersAheadOfWriters(t *testing.T) {
	ctx, rdb := setup(t)
	readWakes := listenOn(t, ctx, rdb, rwReadWake)
	w := hold("w", "1", "alice")
	tryRW(t, ctx, rdb, w, "")
	expectRefused(t, tryRW(t, ctx, rdb, hold("r", "2", "bob"), "reader-bob"), "read while alice writes")
	expectRefused(t, tryRW(t, ctx, rdb, hold("w", "3", "carol"), "writer-carol"), "write while alice writes")
	expectRefused(t, tryRW(t, ctx, rdb, hold("r", "4", "dave"), "reader-dave"), "read while alice writes")

	releaseRW(t, ctx, rdb, w)
	expectMessage(t, readWakes, "*")
	expectRefused(t, tryRW(t, ctx, rdb, hold("w", "3", "carol"), "writer-carol"), "write while readers are passed")
	expectRefused(t, tryRW(t, ctx, rdb, hold("r", "5", "erin"), ""), "a reader that was not waiting")
	expectGranted(t, tryRW(t, ctx, rdb, hold("r", "2", "bob"), "reader-bob"), "passed reader bob")
	expectGranted(t, tryRW(t, ctx, rdb, hold("r", "4", "dave"), "reader-dave"), "passed reader dave")
	if n, _ := rdb.Exists(ctx, rwPass).Result(); n != 0 {
		t.Fatal("the pass outlived the readers it let in")
	}
}

func TestRWRelease_LastReaderWakesOneWriter(t *testing.T) {
	ctx, rdb := setup(t)
	writeWakes := listenOn(t, ctx, rdb, rwWake)
	r1, r2 := hold("r", "1", "alice"), hold("r", "2", "bob")
	tryRW(t, ctx, rdb, r1, "")
	tryRW(t, ctx, rdb, r2, "")
	expectRefused(t, tryRW(t, ctx, rdb, hold("w", "3", "carol"), "writer-carol"), "write while two read")
	releaseRW(t, ctx, rdb, r1)
	releaseRW(t, ctx, rdb, r2)
	expectMessage(t, writeWakes, "writer-carol")
	expectGranted(t, tryRW(t, ctx, rdb, hold("w", "3", "carol"), "writer-carol"), "the woken writer")
	if n, _ := rdb.Exists(ctx, rwWriters).Result(); n != 0 {
		t.Fatal("the writer stayed registered after it got its turn")
	}
}

func TestRWAbandon_LateAttemptRefusesItself(t *testing.T) {
	ctx, rdb := setup(t)
	a := hold("w", "1", "alice")
	if n := abandonRW(t, ctx, rdb, a, ""); n != 0 {
		t.Fatalf("abandon before arrival: %d, want 0", n)
	}
	if res := tryRW(t, ctx, rdb, a, ""); res[0] != -1 {
		t.Fatalf("late acquire: %v, want {-1, 0}", res)
	}
	if n, _ := rdb.Exists(ctx, rwState, rwHolds, rwFence).Result(); n != 0 {
		t.Fatal("a refused late acquire left keys behind")
	}
}

func TestRWAbandon_ReleasesAnAppliedAttempt(t *testing.T) {
	ctx, rdb := setup(t)
	tryRW(t, ctx, rdb, hold("w", "1", "alice"), "")
	a := hold("w", "2", "alice")
	tryRW(t, ctx, rdb, a, "")
	if n := abandonRW(t, ctx, rdb, a, ""); n != 1 {
		t.Fatalf("abandon of an applied re-entry: %d, want 1", n)
	}
	if n, _ := rdb.HGet(ctx, rwState, "nwalice").Int(); n != 1 {
		t.Fatalf("hold count %d after the abandoned re-entry, want 1", n)
	}
}

// A writer that was woken and leaves must not swallow the wake-up.
func TestRWAbandon_WokenWriterPassesTheWakeUpOn(t *testing.T) {
	ctx, rdb := setup(t)
	writeWakes := listenOn(t, ctx, rdb, rwWake)
	r := hold("r", "1", "alice")
	tryRW(t, ctx, rdb, r, "")
	tryRW(t, ctx, rdb, hold("w", "2", "bob"), "writer-bob")
	rdb.ZIncrBy(ctx, rwWriters, 1000, "writer-bob") // so that carol's runs out after bob's
	tryRW(t, ctx, rdb, hold("w", "3", "carol"), "writer-carol")
	rdb.ZIncrBy(ctx, rwWriters, 2000, "writer-carol")
	releaseRW(t, ctx, rdb, r)
	expectMessage(t, writeWakes, "writer-bob")
	abandonRW(t, ctx, rdb, "", "writer-bob")
	expectMessage(t, writeWakes, "writer-carol")
}

func TestRWScripts_ForeignValuesFailWithoutAHold(t *testing.T) {
	for _, foreign := range []string{rwState, rwHolds, rwFence, rwWriters, rwPass} {
		t.Run(foreign, func(t *testing.T) {
			ctx, rdb := setup(t)
			rdb.LPush(ctx, foreign, "x")
			_, err := RWAcquire.Run(ctx, rdb, withTombstone("x"), argvOf(RWAcquireArgs{Acquire: acq(hold("w", "1", "alice"), 10000, "waiter")}, "")...).Result()
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("acquire: %v, want WRONGTYPE", err)
			}
			if v, _ := rdb.LRange(ctx, foreign, 0, -1).Result(); len(v) != 1 || v[0] != "x" {
				t.Fatal("the foreign value was changed")
			}
			if foreign != rwHolds {
				if n, _ := rdb.Exists(ctx, rwHolds).Result(); n != 0 {
					t.Fatal("a failed acquire left a hold behind")
				}
			}
		})
	}
}

// A writer registered by an earlier attempt whose owner has since started
// reading is refused the upgrade and no longer holds readers back.
func TestRWAcquire_RefusedUpgradeUnregistersTheWaiter(t *testing.T) {
	ctx, rdb := setup(t)
	w := hold("w", "1", "carol")
	tryRW(t, ctx, rdb, w, "")
	expectRefused(t, tryRW(t, ctx, rdb, hold("r", "2", "alice"), "reader-alice"), "read while carol writes")
	expectRefused(t, tryRW(t, ctx, rdb, hold("w", "3", "alice"), "writer-alice"), "write while carol writes")
	releaseRW(t, ctx, rdb, w)
	expectGranted(t, tryRW(t, ctx, rdb, hold("r", "2", "alice"), "reader-alice"), "alice's passed reader")
	if res := tryRW(t, ctx, rdb, hold("w", "3", "alice"), "writer-alice"); res[0] != -2 {
		t.Fatalf("upgrade: %v, want {-2, 0}", res)
	}
	if n, _ := rdb.ZCard(ctx, rwWriters).Result(); n != 0 {
		t.Fatal("the refused writer is still registered")
	}
	expectGranted(t, tryRW(t, ctx, rdb, hold("r", "4", "bob"), ""), "a new reader once no writer waits")
}

// A writer leaving passes the waiting readers ahead by renaming their set
// to the readers passed: never over a value dlock did not write there,
// which is left byte for byte while the readers are still woken.
func TestRWRelease_ForeignPassedReadersLeftAsTheyAre(t *testing.T) {
	ctx, rdb := setup(t)
	readWakes := listenOn(t, ctx, rdb, rwReadWake)
	w := hold("w", "1", "alice")
	tryRW(t, ctx, rdb, w, "")
	expectRefused(t, tryRW(t, ctx, rdb, hold("r", "2", "bob"), "reader-bob"), "a read while written")
	rdb.ZAdd(ctx, rwPass, redis.Z{Score: 1 << 50, Member: "carol"})
	before, _ := rdb.Dump(ctx, rwPass).Result()
	if n := releaseRW(t, ctx, rdb, w); n != 1 {
		t.Fatalf("release: %d, want 1", n)
	}
	if after, _ := rdb.Dump(ctx, rwPass).Result(); after != before {
		t.Fatal("the foreign value was changed")
	}
	expectMessage(t, readWakes, "*")
}

// A write hold keeps the type that took it (ARGV[6]) per owner, the latest
// write's; a write without one removes it, a read leaves it, and it goes
// with the owner's last write hold, released or purged.
func TestRWAcquire_KeepsTheTypeOfTheOwnersLatestWrite(t *testing.T) {
	ctx, rdb := setup(t)
	acquire := func(member string, takenBy string) {
		t.Helper()
		res, err := AcquireReply(RWAcquire.Run(ctx, rdb, withTombstone(member[1:33]), argvOf(RWAcquireArgs{TakenBy: takenBy, Acquire: acq(member, 10000, "")}, "")...))
		if err != nil {
			t.Fatal(err)
		}
		expectGranted(t, res, member)
	}
	kept := func(what, owner, want string) {
		t.Helper()
		got, err := rdb.HGet(ctx, rwState, "aw"+owner).Result()
		if err == redis.Nil {
			got, err = "(none)", nil
		}
		if err != nil || got != want {
			t.Fatalf("%s: %q, %v; want %q", what, got, err, want)
		}
		if want == "(none)" {
			want = ""
		}
		reply, err := RWInspect.Run(ctx, rdb, rwKeys, "").Slice()
		if err != nil {
			t.Fatal(err)
		}
		for i := 10; i+4 < len(reply); i += 5 {
			if reply[i] == owner && reply[i+1] == "w" && reply[i+4] != want {
				t.Fatalf("%s: inspect says %q; want %q", what, reply[i+4], want)
			}
		}
	}
	w1, w2, w3, r := hold("w", "1", "alice"), hold("w", "2", "alice"), hold("w", "3", "alice"), hold("r", "4", "alice")
	acquire(w1, "ReentrantMutex")
	kept("a marked write", "alice", "ReentrantMutex")
	acquire(w2, "")
	kept("a write without a type", "alice", "(none)")
	acquire(w3, "ReentrantMutex")
	acquire(r, "Other")
	kept("a read after a marked write", "alice", "ReentrantMutex")
	for _, m := range []string{w1, w2, w3} {
		releaseRW(t, ctx, rdb, m)
	}
	kept("the last write released, a read left", "alice", "(none)")
	releaseRW(t, ctx, rdb, r)

	bob := hold("w", "5", "bob")
	acquire(bob, "ReentrantMutex")
	expire(t, ctx, rdb, bob)
	acquire(hold("w", "6", "carol"), "")
	kept("an expired write purged", "bob", "(none)")
}
