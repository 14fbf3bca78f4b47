package scripts

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Registrations of another protocol (see registration_parts in common.lua):
// a release never hands such a waiter the lock, nor publishes what it
// registered, as it cannot know what the registration holds; it frees the
// lock and wakes the waiter's client with "*", which every protocol takes
// as "try again".

// futureTag is the client tag of a dlock of a later protocol.
const futureTag = "v9abcdefabcdefab"

// published runs release and returns every message published on the lock's
// channels meanwhile, as "channel payload".
func published(t *testing.T, ctx context.Context, rdb *redis.Client, release func()) []string {
	t.Helper()
	ps := rdb.PSubscribe(ctx, channel+"*")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	release()
	const end = "end of the release"
	if err := rdb.Publish(ctx, channel, end).Err(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Payload == end {
			return got
		}
		got = append(got, m.Channel+" "+m.Payload)
	}
}

func expectWokenNotHanded(t *testing.T, ctx context.Context, rdb *redis.Client, got []string, secret string) {
	t.Helper()
	if holder, err := rdb.Get(ctx, lockKey).Result(); err != redis.Nil {
		t.Errorf("the lock is held by %q (%v); want it free, not handed to a waiter of another protocol", holder, err)
	}
	want := channel + ":" + futureTag + " *"
	if len(got) != 1 || got[0] != want {
		t.Errorf("published %q; want %q alone", got, want)
	}
	for _, m := range got {
		if strings.Contains(m, secret) {
			t.Errorf("published %q: it carries the waiter's owner token", m)
		}
	}
}

func TestMutexRelease_AWaiterOfAnotherProtocolIsWokenNotHanded(t *testing.T) {
	ctx, rdb := setup(t)
	acquire(t, ctx, rdb, tok("a"))
	entry := futureTag + "/0b:1:10000:" + tok("b")
	if res := acquireAsWaiter(t, ctx, rdb, tok("b"), entry, ""); res[0] != 0 {
		t.Fatalf("waiter: %v, want refused", res)
	}
	got := published(t, ctx, rdb, func() { release(t, ctx, rdb, tok("a")) })
	expectWokenNotHanded(t, ctx, rdb, got, tok("b"))
}

func TestFairRelease_AWaiterOfAnotherProtocolIsWokenNotHanded(t *testing.T) {
	ctx, rdb := setup(t)
	fairTry(t, ctx, rdb, fairA, "")
	expectRefused(t, fairTry(t, ctx, rdb, fairB, futureTag+"/0b"), "waiter")
	got := published(t, ctx, rdb, func() { runInt(t, ctx, rdb, FairRelease, fairKeys, fairA, "PUBLISH") })
	expectWokenNotHanded(t, ctx, rdb, got, fairB)
}

// A registration of a form this protocol does not read (here one that
// carries an owner token, as a Mutex's does) is never published whole.
func TestSemRelease_AWaiterOfAnotherProtocolIsWokenNotPublished(t *testing.T) {
	ctx, rdb := setup(t)
	expectGranted(t, run(t, ctx, rdb, SemAcquire, with(semAcquireKeys, tok("a")), argvOf(SemAcquireArgs{Permits: 1, Acquire: acq(tok("a"), 10000, "")}, "")...), "holder")
	expectRefused(t, run(t, ctx, rdb, SemAcquire, with(semAcquireKeys, tok("b")), argvOf(SemAcquireArgs{Permits: 1, Acquire: acq(tok("b"), 10000, futureTag+"/0b:1:"+tok("b"))}, "")...), "waiter")
	got := published(t, ctx, rdb, func() { runInt(t, ctx, rdb, SemRelease, semKeys, tok("a"), "PUBLISH") })
	want := channel + ":" + futureTag + " *"
	if len(got) != 1 || got[0] != want {
		t.Errorf("published %q; want %q alone", got, want)
	}
}
