//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// TestStarvedFor_CountsEachMomentOnceAndOnlyInTheWindow: spans of several
// logs that overlap count once, and only their part inside the window.
func TestStarvedFor_CountsEachMomentOnceAndOnlyInTheWindow(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a, b := &stallLog{}, &stallLog{}
	a.add(at(0), at(100))   // half in the window
	b.add(at(80), at(120))  // overlaps a's
	a.add(at(200), at(230)) // inside
	b.add(at(210), at(220)) // inside a's
	b.add(at(400), at(500)) // after
	if got, want := starvedFor(at(50), at(300), a, b, nil), 100*time.Millisecond; got != want {
		t.Errorf("starved %v of [50 ms, 300 ms], want %v (50 to 120, 200 to 230)", got, want)
	}
}

// TestProcessStalls_SeeTheProcessStopped: the probe sees the explorer's
// process stopped (SIGSTOP, then SIGCONT 300 ms later, from a shell it
// started), as a loaded machine's scheduler stops it.
func TestProcessStalls_SeeTheProcessStopped(t *testing.T) {
	log := processStalls()
	before := time.Now()
	cmd := exec.Command("sh", "-c", "kill -STOP "+strconv.Itoa(os.Getpid())+"; sleep 0.3; kill -CONT "+strconv.Itoa(os.Getpid()))
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	// The probe's goroutine may be the last to run after the resume.
	deadline := time.Now().Add(10 * time.Second)
	for starvedFor(before, time.Now(), log) < 250*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("the probe saw %v of a 300 ms stop", starvedFor(before, time.Now(), log))
		}
		time.Sleep(probeTick)
	}
}

// TestRoundTrips_SlowOnesThatCameBackAreRecorded: the hook records a
// command held up at the server (a write, under CLIENT PAUSE WRITE from
// another connection, held 200 ms from the moment the server shows it
// blocked) that came back, and not one that timed out: that is a loss's
// symptom.
func TestRoundTrips_SlowOnesThatCameBackAreRecorded(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	key := lockKey(lockName(t))
	hooked := func(timeout time.Duration) (*redis.Client, *commandFaults) {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: timeout, WriteTimeout: timeout, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		f := newCommandFaults(1, 0, nil, nil)
		rdb.AddHook(f)
		if err := rdb.Ping(ctx).Err(); err != nil { // connected before the pause
			t.Fatal(err)
		}
		return rdb, f
	}
	// held sends a write under a pause, and ends the pause once the write
	// has been blocked for hold (0: it is left to time out first).
	held := func(rdb *redis.Client, hold time.Duration) error {
		t.Helper()
		if err := srv.Client().Do(ctx, "CLIENT", "PAUSE", 60_000, "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := srv.Client().Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Fatal(err)
			}
		}()
		done := make(chan error, 1)
		go func() { done <- rdb.Set(ctx, key, "v", time.Minute).Err() }()
		if hold == 0 {
			return <-done
		}
		for { // reads pass a WRITE pause
			info, err := srv.Client().Info(ctx, "clients").Result()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(info, "blocked_clients:1") {
				break
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(hold) // the fault: a server that does not answer for hold
		if err := srv.Client().Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
			t.Fatal(err)
		}
		return <-done
	}

	rdb, f := hooked(10 * time.Second)
	began := time.Now()
	if err := held(rdb, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := starvedFor(began, time.Now(), f.slow); got < 200*time.Millisecond {
		t.Errorf("a command held up 200 ms recorded as %v slow", got)
	}

	short, g := hooked(100 * time.Millisecond)
	began = time.Now()
	if err := held(short, 0); !isTimeout(err) {
		t.Fatalf("want a timeout, got %v", err)
	}
	if got := starvedFor(began, time.Now(), g.slow); got != 0 {
		t.Errorf("a timed-out command recorded as %v slow", got)
	}
}

// TestCheckHolds_ALossIsExplainedByStarvationOnlyIfThereWasEnough: in a
// fault-free run, a lease lost (or returned lost) while its process was
// starved for a quarter of its TTL or more is noted, and one lost with
// less starvation is a violation: the checker's line between a loaded
// machine and a renewal dlock failed to make.
func TestCheckHolds_ALossIsExplainedByStarvationOnlyIfThereWasEnough(t *testing.T) {
	now := time.Now()
	lost := func(client int, starved time.Duration, invalid bool) hold {
		return hold{client: client, kind: "mutex", tokens: map[string]uint64{"n" + strconv.Itoa(client): 1},
			asked: now, start: now, end: now.Add(time.Second), lost: true, invalid: invalid,
			loss: fmt.Errorf("%w (%w): no renewal confirmed before its deadline", dlock.ErrLeaseLost, dlock.LossUnreachable), starved: starved, ttl: time.Second,
			deadline: now.Add(time.Second), lossSeen: now.Add(time.Second)}
	}
	out := &outcome{injected: map[string]int{}}
	checkHolds(&schedule{}, []hold{lost(1, 300*time.Millisecond, false), lost(2, 100*time.Millisecond, false),
		lost(3, 250*time.Millisecond, true), lost(4, 0, true)}, nil, out)
	if out.starved != 2 {
		t.Errorf("%d holds explained by starvation, want 2 (clients 1 and 3): %v", out.starved, out.notes)
	}
	want := []string{"returned lost: client 4", "unexplained loss: client 2"}
	if len(out.violations) != len(want) || !strings.HasPrefix(out.violations[0], want[0]) && !strings.HasPrefix(out.violations[0], want[1]) ||
		!strings.HasPrefix(out.violations[1], want[0]) && !strings.HasPrefix(out.violations[1], want[1]) {
		t.Errorf("violations %q, want client 2's loss and client 4's return", out.violations)
	}
}

// TestExtendedTTL_IsTheOneTheLeaseCountsOn: a loss after an Extend is
// judged by the TTL the lease then counted on. Confirmed, the Extend's,
// longer or shorter: a quarter of a shorter TTL it began with is less
// starvation than a longer one's renewals survive. Failed, a shorter one
// may have cut the hold (dlock counts on it), a longer one did not.
func TestExtendedTTL_IsTheOneTheLeaseCountsOn(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	failed := errors.New("i/o timeout")
	for _, c := range []struct {
		ttl, to time.Duration
		err     error
		want    time.Duration
	}{
		{ms(500), ms(1500), nil, ms(1500)},
		{ms(500), ms(300), nil, ms(300)},
		{ms(500), ms(300), failed, ms(300)},
		{ms(500), ms(1500), failed, ms(500)},
	} {
		if got := extendedTTL(c.ttl, c.to, c.err); got != c.want {
			t.Errorf("a lease of %v Extended to %v (%v): judged by %v, want %v", c.ttl, c.to, c.err, got, c.want)
		}
	}
}

// TestCheckHolds_ARefusalSeenBeforeTheDeadlineIsNeverStarvation: Redis
// keeps a hold at least until its lease's deadline, and dlock reads a
// renewal's answer little past it, so a lease that Redis told was gone
// (expired, taken), seen lost before its deadline, was lost to dlock or to
// a fault, however starved its process was. Starvation may explain a
// loss at the deadline (unreachable), or one seen only past it.
func TestCheckHolds_ARefusalSeenBeforeTheDeadlineIsNeverStarvation(t *testing.T) {
	now := time.Now()
	deadline := now.Add(time.Second)
	lost := func(client int, reason dlock.LossReason, seen time.Time) hold {
		return hold{client: client, kind: "mutex", tokens: map[string]uint64{"n" + strconv.Itoa(client): 1},
			asked: now, start: now, end: now.Add(2 * time.Second), lost: true,
			loss: fmt.Errorf("%w (%w)", dlock.ErrLeaseLost, reason), starved: time.Second, ttl: time.Second,
			deadline: deadline, lossSeen: seen}
	}
	out := &outcome{injected: map[string]int{}}
	checkHolds(&schedule{}, []hold{
		lost(1, dlock.LossExpired, deadline.Add(-300*time.Millisecond)),
		lost(2, dlock.LossTaken, deadline.Add(-300*time.Millisecond)),
		lost(3, dlock.LossUnreachable, deadline.Add(10*time.Millisecond)),
		lost(4, dlock.LossExpired, deadline.Add(10*time.Millisecond)),
	}, nil, out)
	if out.starved != 2 {
		t.Errorf("%d holds explained by starvation, want 2 (clients 3 and 4): %v", out.starved, out.notes)
	}
	if len(out.violations) != 2 || !strings.HasPrefix(out.violations[0], "unexplained loss: client 1") ||
		!strings.HasPrefix(out.violations[1], "unexplained loss: client 2") {
		t.Errorf("violations %q, want the losses of clients 1 and 2", out.violations)
	}
}

// TestHeldTTL_IsTheLeaseTimeOfAFixedLease: a lease with a lease time holds
// for it, whatever the TTL (dlock's holdTTL), so a loss or a return with
// no time left is judged by it, longer or shorter than the TTL.
func TestHeldTTL_IsTheLeaseTimeOfAFixedLease(t *testing.T) {
	for _, o := range []op{
		{TTL: 500 * time.Millisecond},
		{TTL: 500 * time.Millisecond, Lease: 1200 * time.Millisecond},
		{TTL: 2 * time.Second, Lease: 400 * time.Millisecond},
	} {
		want := o.TTL
		if o.Lease > 0 {
			want = o.Lease
		}
		if got := heldTTL(o); got != want {
			t.Errorf("TTL %v, lease time %v: judged by %v, want %v", o.TTL, o.Lease, got, want)
		}
	}
}

// TestStarvedBefore_NotWhileItsProcessWasSuspended: a lease returned with
// no time left after its process's suspension is judged by the stalls
// after the resume alone. dlock judges what it returns by both clocks
// once the process resumed, so the wall clock's run during the
// suspension is dlock's to see, and stalls measured meanwhile (the
// machine's, under load) explain nothing; the startLease that judged a
// grant by the monotonic clock alone was excused so, 3 replays of 9 of
// the suspend CI case on a loaded machine. A lease returned while still
// suspended was judged as the suspension began.
func TestStarvedBefore_NotWhileItsProcessWasSuspended(t *testing.T) {
	t0 := time.Now().Add(time.Hour) // where the probe has measured nothing
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	proc := func() *process {
		p := &process{hook: newCommandFaults(1, 0, nil, nil), suspended: newSuspendState(), slowIsStarved: true}
		p.hook.slow.add(at(-300), at(-200)) // before the suspension
		p.hook.slow.add(at(0), at(900))     // during it
		p.hook.slow.add(at(1100), at(1150)) // after it
		p.suspended.at = at(0)
		close(p.suspended.began)
		return p
	}
	resumed := proc()
	resumed.suspended.length = time.Second
	close(resumed.suspended.resumed)
	if got, want := resumed.starvedBefore(at(1200), time.Second), 50*time.Millisecond; got != want {
		t.Errorf("returned 200 ms after a resume: starved %v, want %v (after the resume)", got, want)
	}
	if got, want := resumed.starvedBefore(at(-100), time.Second), 100*time.Millisecond; got != want {
		t.Errorf("returned before the suspension: starved %v, want %v", got, want)
	}
	still := proc()
	if got, want := still.starvedBefore(at(500), time.Second), 100*time.Millisecond; got != want {
		t.Errorf("returned while suspended: starved %v, want %v (before the suspension)", got, want)
	}
}

// TestStallLog_KeepsOnlyWhatCanExplainALoss: a soak's 90 minutes of
// stalls, one every 7 ms (the probe's tick and slack: the most it can
// record), leave the log with stallKept's worth, its array not much
// larger.
func TestStallLog_KeepsOnlyWhatCanExplainALoss(t *testing.T) {
	l := &stallLog{}
	t0 := time.Now()
	every := probeTick + probeSlack
	for at := t0; at.Before(t0.Add(90 * time.Minute)); at = at.Add(every) {
		l.add(at, at.Add(every))
	}
	kept := int(stallKept/every) + 2
	if len(l.spans) > kept || cap(l.spans) > 4*kept {
		t.Errorf("%d spans kept in an array of %d, want at most %d (%v of them)", len(l.spans), cap(l.spans), kept, stallKept)
	}
}

// TestCheckHolds_StarvationIsMeasuredWhenTheRunIsChecked: a stall that
// began before a lease's deadline and ended after it (a reply read late,
// a wait the kernel counts when it ends) is logged after the hold ended;
// the hold's starvation is measured when the run is checked, so it counts.
func TestCheckHolds_StarvationIsMeasuredWhenTheRunIsChecked(t *testing.T) {
	now := time.Now()
	ttl := 400 * time.Millisecond
	deadline := now.Add(time.Second)
	stalls := &stallLog{}
	h := hold{client: 1, kind: "mutex", tokens: map[string]uint64{"n": 1}, asked: now, start: now, end: deadline, lost: true,
		loss: fmt.Errorf("%w (%w): no renewal confirmed before its deadline", dlock.ErrLeaseLost, dlock.LossUnreachable),
		ttl:  ttl, deadline: deadline, lossSeen: deadline}
	h.measure = func(h *hold) { h.starved = starvedFor(deadline.Add(-ttl), deadline, stalls) }
	stalls.add(deadline.Add(-300*time.Millisecond), deadline.Add(100*time.Millisecond)) // logged when it ended
	out := &outcome{injected: map[string]int{}}
	checkHolds(&schedule{}, []hold{h}, nil, out)
	if out.starved != 1 || len(out.violations) != 0 {
		t.Errorf("%d explained by starvation, violations %q; want the loss explained by its 300 ms of stall", out.starved, out.violations)
	}
}

// TestLongestStall_TheLongestNotTheirSum: stamps read 6 ms late
// every 2 ms, in batches as a late reader drains them, cover most of a
// 300 ms TTL together but hold no reply up past its margin: the network
// probe counts its longest stall, 6 ms; one of 200 ms counts whole.
func TestLongestStall_TheLongestNotTheirSum(t *testing.T) {
	t0 := time.Now().Add(time.Hour)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	steady := &stallLog{}
	for sent := 0; sent < 300; sent += 8 { // a batch: stamps sent at sent..sent+6, read at sent+6
		for s := sent; s <= sent+4; s += 2 {
			steady.add(at(s), at(sent+6))
		}
	}
	if covered := starvedFor(at(0), at(300), steady); covered < 200*time.Millisecond {
		t.Fatalf("the steady spans cover %v together: not the case this test is for", covered)
	}
	if got := longestStall(at(0), at(300), steady); got != 6*time.Millisecond {
		t.Errorf("steady 6 ms lateness: %v stalled, want 6ms", got)
	}
	once := &stallLog{}
	once.add(at(50), at(250))
	once.add(at(52), at(250)) // the backlog, read at once
	if got := longestStall(at(0), at(300), once); got != 200*time.Millisecond {
		t.Errorf("one 200 ms stall: %v, want 200ms", got)
	}
}

// TestStarved_ALostRenewalsOwnLateReplyExplainsNothing: a renewal sent
// two thirds of a TTL before the deadline and answered just after it is
// the loss's symptom, as a timed-out one is: its round trip, logged when
// it came back, counts for nothing; one answered before the deadline
// counts.
func TestStarved_ALostRenewalsOwnLateReplyExplainsNothing(t *testing.T) {
	t0 := time.Now().Add(time.Hour)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ttl := 300 * time.Millisecond
	deadline := at(300)
	late := &process{hook: newCommandFaults(1, 0, nil, nil), slowIsStarved: true}
	late.hook.slow.add(at(100), at(305))
	if got := late.starved(deadline.Add(-ttl), deadline); starvedEnough(got, ttl) {
		t.Errorf("a reply after the deadline: starved %v of %v, want less than a quarter", got, ttl)
	}
	inTime := &process{hook: newCommandFaults(1, 0, nil, nil), slowIsStarved: true}
	inTime.hook.slow.add(at(100), at(290))
	if got := inTime.starved(deadline.Add(-ttl), deadline); got != 190*time.Millisecond {
		t.Errorf("a slow reply before the deadline: starved %v, want 190ms", got)
	}
}
