//go:build faults

package faults

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/faults/linear"
)

// TestLinearCheck_ARefusalWhileAWaiterHeldAGrantItGaveBack: client 0's
// Lock took the lock, gave the grant back unconfirmed and was granted it
// again after client 2 had held it; client 1's TryLock, refused before
// that, saw the first hold. By the calls alone nobody held the lock then:
// a violation, as the soak reported (seed 1795714824042407448). With the
// hold the call marked in doubt, none.
func TestLinearCheck_ARefusalWhileAWaiterHeldAGrantItGaveBack(t *testing.T) {
	start := time.Now()
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	mutex := op{Kind: "mutex", Names: []string{"m"}}
	granted := func(client int, owner string, call, ret time.Time, token uint64) leaseCall {
		return grantedCall(client, owner, mutex, call, ret, token, ret.Add(time.Second))
	}
	check := func(inDoubt bool) []string {
		rec := &leaseRecorder{start: start}
		rec.add(granted(0, "client 0 op 0", at(0), at(300), 3)) // given back first, granted again at the end
		if inDoubt {
			rec.recordInDoubt(0, "client 0 op 0", mutex, at(0), at(300))
		}
		rec.refused(1, "client 1 op 0", op{Kind: "mutex", Names: mutex.Names, Try: true}, at(20), at(30), dlock.ErrNotAcquired)
		// Another client held the lock in between: client 0's call did not hold it from before the refusal on.
		rec.add(granted(2, "client 2 op 0", at(50), at(60), 2))
		rec.ended(2, "client 2 op 0", mutex, linear.Release, at(70), at(80), nil)
		rec.ended(0, "client 0 op 0", mutex, linear.Release, at(400), at(410), nil)
		var out outcome
		checkLinearizable(&schedule{}, rec, map[string]string{"m": "mutex"}, nil, &out)
		return out.violations
	}
	if v := check(false); len(v) != 1 {
		t.Fatalf("without the hold in doubt: %d violations, want the refusal flagged\n%s", len(v), strings.Join(v, "\n"))
	}
	if v := check(true); len(v) != 0 {
		t.Fatalf("with the hold in doubt: %d violations\n%s", len(v), strings.Join(v, "\n"))
	}
}

// TestInDoubt_ALockThatGaveBackAGrantIsMarked: the mark comes from dlock
// itself, through the explorer's Observer: a Lock whose first grant came
// back after its TTL (its attempt held up before it was sent) is marked;
// one granted at once is not.
func TestInDoubt_ALockThatGaveBackAGrantIsMarked(t *testing.T) {
	const ttl = 300 * time.Millisecond
	rdb := newRedisAt(startServer(t).Addr())
	t.Cleanup(func() { _ = rdb.Close() })
	var slow atomic.Bool
	rdb.AddHook(beforeSending(func(cmds []redis.Cmder) {
		for _, cmd := range cmds {
			if cmd.Name() == "fcall" && slow.CompareAndSwap(true, false) {
				time.Sleep(ttl * 3 / 2) // applied after the TTL its sender counts from
			}
		}
	}))
	client := newClient(t, rdb, dlock.WithTTL(ttl), dlock.WithObserver(observedInDoubt))
	ctx := ctxFor(t, 30*time.Second)
	for _, late := range []bool{false, true} {
		slow.Store(late)
		actx, inDoubt := withInDoubt(ctx)
		lease, err := client.Mutex(lockName(t)).Lock(actx)
		if err != nil {
			t.Fatalf("Lock (first grant late: %v): %v", late, err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if inDoubt.Load() != late {
			t.Errorf("first grant late: %v; marked in doubt: %v", late, inDoubt.Load())
		}
	}
}

// grantedCall is o's acquisition by owner, recorded as returning a lease
// with token on o's first name, from call to ret, its deadline lapse.
func grantedCall(client int, owner string, o op, call, ret time.Time, token uint64, lapse time.Time) leaseCall {
	return leaseCall{client: client, names: o.Names, call: call, ret: ret, tokens: map[string]uint64{o.Names[0]: token}, lapse: lapse,
		op: linear.LeaseOp{Op: linear.Acquire, Owner: owner, Mode: modeOf(o.Kind)}, out: linear.Result{OK: true}}
}

// TestLinearCheck_ASlowTryRefusalMayHaveHeldTheLockWithinItsCall: a
// TryLock refused so slowly that go-redis may have sent its attempt twice
// (a read timeout, readTimeout) tells nothing: the other copy may have
// taken the lock once it was free, held until the call gave it back
// before returning, and another TryLock refused meanwhile, with no lease
// held. A prompt refusal still tells that the lock was held.
func TestLinearCheck_ASlowTryRefusalMayHaveHeldTheLockWithinItsCall(t *testing.T) {
	start := time.Now()
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	mutex := op{Kind: "mutex", Names: []string{"m"}, TTL: time.Second}
	try := op{Kind: "mutex", Names: mutex.Names, TTL: time.Second, Try: true}
	check := func(took, refusedAt time.Duration) []string {
		rec := &leaseRecorder{start: start}
		rec.add(grantedCall(0, "client 0 op 0", mutex, at(0), at(10), 1, at(1000)))
		rec.ended(0, "client 0 op 0", mutex, linear.Release, at(100), at(110), nil)
		rec.refused(1, "client 1 op 0", try, at(50), at(50).Add(took), dlock.ErrNotAcquired)
		// Nobody known holds it.
		rec.refused(2, "client 2 op 0", try, start.Add(refusedAt), start.Add(refusedAt+10*time.Millisecond), dlock.ErrNotAcquired)
		var out outcome
		checkLinearizable(&schedule{}, rec, map[string]string{"m": "mutex"}, nil, &out)
		return out.violations
	}
	if v := check(readTimeout-500*time.Millisecond, 500*time.Millisecond); len(v) != 1 {
		t.Fatalf("a prompt refusal: %d violations, want the second refusal flagged\n%s", len(v), strings.Join(v, "\n"))
	}
	slow := readTimeout + 100*time.Millisecond
	if v := check(slow, 500*time.Millisecond); len(v) != 0 {
		t.Fatalf("a refusal that took a read timeout: %d violations\n%s", len(v), strings.Join(v, "\n"))
	}
	// Its copy's hold was given back before the call returned, or ran
	// out with its TTL: it explains no refusal after that.
	if v := check(slow, 50*time.Millisecond+slow+try.TTL+100*time.Millisecond); len(v) != 1 {
		t.Fatalf("a refusal a TTL after the slow one returned: %d violations, want it flagged\n%s", len(v), strings.Join(v, "\n"))
	}
}
