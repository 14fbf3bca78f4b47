//go:build faults

package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/faults/linear"
)

// TestExplore_CrashesKeepTheCISchedules: crashes and slot migrations come
// from streams under which no CI seed but crashSeed draws one, so every
// other CI seed keeps the schedule that caught what it caught.
func TestExplore_CrashesKeepTheCISchedules(t *testing.T) {
	for _, seed := range ciSeeds {
		p := randomParams(seed, maxClients())
		for _, f := range []string{"crash", "migrate"} {
			if p.has(f) != (seed == crashSeed) {
				t.Errorf("CI seed %d draws %s: %v, want %v", seed, f, p.has(f), seed == crashSeed)
			}
		}
	}
}

// TestCheckCrashes_FlagsAWaiterKeptPastTheDeadClaim: the waiter check is
// no check that cannot fail. A dead process's Mutex with a 1 s TTL frees
// by 1 s + crashSlack after its death; a live waiter that asked at the
// death and gave up 3 s later, or got it 2.5 s later, with no live holder
// in between, was kept out by nothing dlock allows. One that another live
// client beat to it was not.
func TestCheckCrashes_FlagsAWaiterKeptPastTheDeadClaim(t *testing.T) {
	p := params{Seed: 1, Clients: 2, Ops: 1, Kinds: []string{"mutex"}, Faults: []string{"crash"}}
	s := &schedule{params: p, process: []int{0, 1}, crashes: []crash{{Process: 0}}}
	lock := op{Kind: "mutex", Names: []string{"m"}, TTL: time.Second, Wait: 3 * time.Second}
	s.ops = [][]op{{lock}, {lock}}
	died := time.Now()
	dead := &process{crash: newCrashState()}
	dead.crash.at = died
	close(dead.crash.dead)
	procs := map[int]*process{0: dead, 1: {crash: newCrashState()}}
	held := hold{client: 0, kind: "mutex", tokens: map[string]uint64{"m": 1}, start: died.Add(-time.Second), end: died, crashed: true}
	starved := failedWait{client: 1, op: lock, asked: died, gaveUp: died.Add(3 * time.Second), err: dlock.ErrNotAcquired}

	out := &outcome{params: p, injected: map[string]int{}}
	checkCrashes(s, procs, []hold{held}, []failedWait{starved}, out)
	if len(out.violations) != 1 || !strings.HasPrefix(out.violations[0], "crash:") {
		t.Errorf("a waiter kept out past the dead claim: violations %q, want one crash violation", out.violations)
	}

	late := hold{client: 1, kind: "mutex", tokens: map[string]uint64{"m": 2}, asked: died, start: died.Add(2500 * time.Millisecond), end: died.Add(3 * time.Second)}
	out = &outcome{params: p, injected: map[string]int{}}
	checkCrashes(s, procs, []hold{held, late}, nil, out)
	if len(out.violations) != 1 || !strings.HasPrefix(out.violations[0], "crash:") {
		t.Errorf("a waiter that got the lock past the dead claim: violations %q, want one crash violation", out.violations)
	}

	beaten := hold{client: 1, kind: "mutex", tokens: map[string]uint64{"m": 2}, start: died.Add(time.Second), end: died.Add(4 * time.Second)}
	out = &outcome{params: p, injected: map[string]int{}}
	checkCrashes(s, procs, []hold{held, beaten}, []failedWait{starved}, out)
	if len(out.violations) != 0 {
		t.Errorf("a waiter a live holder beat: violations %q, want none", out.violations)
	}
	if out.injected["crash.waiter"] != 1 {
		t.Errorf("judged waits %d, want 1", out.injected["crash.waiter"])
	}
}

// TestCheckCrashes_MultiLockWaiterWaitsForEachOfItsLocks: a MultiLock
// waits until every one of its locks is free, so a waiter the dead
// process's claim on one of them no longer kept out may still be kept out
// by another: by a live holder of another (the explorer's seed
// 1795699141901286711: a dead child had used m1, a live Mutex held m2 to
// past the waiters' give-up), or by the dead process's longer claim on
// another, which one of its other clients held. Neither is a violation;
// a MultiLock waiter kept out past every claim with no live holder of any
// of its locks still is.
func TestCheckCrashes_MultiLockWaiterWaitsForEachOfItsLocks(t *testing.T) {
	p := params{Seed: 1, Clients: 4, Ops: 1, Kinds: []string{"mutex", "multi"}, Faults: []string{"crash"}}
	s := &schedule{params: p, process: []int{0, 0, 1, 2}, crashes: []crash{{Process: 0}}}
	short := op{Kind: "mutex", Names: []string{"m1"}, TTL: 500 * time.Millisecond, Wait: 3 * time.Second}
	long := op{Kind: "mutex", Names: []string{"m2"}, TTL: 2 * time.Second, Wait: 3 * time.Second}
	group := op{Kind: "multi", Names: []string{"m1", "m2"}, TTL: time.Second, Wait: 3 * time.Second}
	other := op{Kind: "mutex", Names: []string{"m2"}, TTL: 3 * time.Second, Wait: 3 * time.Second}
	died := time.Now()
	dead := &process{crash: newCrashState()}
	dead.crash.at = died
	close(dead.crash.dead)
	procs := map[int]*process{0: dead, 1: {crash: newCrashState()}, 2: {crash: newCrashState()}}
	judge := func(ops [][]op, holds []hold, waits []failedWait) *outcome {
		t.Helper()
		s.ops = ops
		out := &outcome{params: p, injected: map[string]int{}}
		checkCrashes(s, procs, holds, waits, out)
		return out
	}

	// The dead process used m1 alone; a live client held m2 from before
	// the death to past the waiter's give-up, 1 s past m1's bound.
	heldM1 := hold{client: 0, kind: "mutex", tokens: map[string]uint64{"m1": 1}, start: died.Add(-100 * time.Millisecond), end: died, crashed: true}
	liveM2 := hold{client: 3, kind: "mutex", tokens: map[string]uint64{"m2": 1}, start: died.Add(-200 * time.Millisecond), end: died.Add(3 * time.Second)}
	gaveUp := failedWait{client: 2, op: group, asked: died, gaveUp: died.Add(2500 * time.Millisecond), err: dlock.ErrNotAcquired}
	if out := judge([][]op{{short}, {}, {group}, {other}}, []hold{heldM1, liveM2}, []failedWait{gaveUp}); len(out.violations) != 0 {
		t.Errorf("a MultiLock waiter a live holder of its other lock kept out: violations %q, want none", out.violations)
	}
	got := hold{client: 2, kind: "multi", tokens: map[string]uint64{"m1": 2, "m2": 2}, asked: died, start: died.Add(3 * time.Second), end: died.Add(3100 * time.Millisecond)}
	if out := judge([][]op{{short}, {}, {group}, {other}}, []hold{heldM1, liveM2, got}, nil); len(out.violations) != 0 {
		t.Errorf("a MultiLock waiter that got its locks once a live holder of one let go: violations %q, want none", out.violations)
	}

	// The dead process held m1 (TTL 0.5 s) and, through another client, m2
	// (TTL 2 s): the waiter got both 2.2 s after the death, past m1's bound
	// and within m2's.
	heldM2 := hold{client: 1, kind: "mutex", tokens: map[string]uint64{"m2": 1}, start: died.Add(-100 * time.Millisecond), end: died, crashed: true}
	within := hold{client: 2, kind: "multi", tokens: map[string]uint64{"m1": 2, "m2": 2}, asked: died, start: died.Add(2200 * time.Millisecond), end: died.Add(2300 * time.Millisecond)}
	if out := judge([][]op{{short}, {long}, {group}, {}}, []hold{heldM1, heldM2, within}, nil); len(out.violations) != 0 {
		t.Errorf("a MultiLock waiter within the dead claim on its other lock: violations %q, want none", out.violations)
	}

	// Past both bounds, with no live holder of either: still a violation,
	// one for the wait, naming both locks.
	past := failedWait{client: 2, op: group, asked: died, gaveUp: died.Add(3 * time.Second), err: dlock.ErrNotAcquired}
	out := judge([][]op{{short}, {long}, {group}, {}}, []hold{heldM1, heldM2}, []failedWait{past})
	if len(out.violations) != 1 || !strings.HasPrefix(out.violations[0], "crash:") || !strings.Contains(out.violations[0], "m1,m2") {
		t.Errorf("a MultiLock waiter kept out past every dead claim: violations %q, want one crash violation naming m1,m2", out.violations)
	}
	if out.injected["crash.waiter"] != 1 {
		t.Errorf("judged waits %d, want 1", out.injected["crash.waiter"])
	}
}

// TestCheckCrashes_AWaiterMayBeKeptOutByAnyDeadProcess: with two dead
// processes on one lock, a waiter may be kept out by the later claim of
// either, and is judged once, by the latest. The explorer's seed
// 1795708793282320701: a process died having used elect0 (its claim ran
// out 2.726 s after, slack included); 280 ms later the child, which had
// taken elect0 260 ms after that death, was killed holding it with a
// 2.727 s TTL, and a waiter got it 2.711 s after the child's death, on
// time, flagged against the first death. Seed 1795708793282319951: a
// process died holding elect0 with a 2.633 s TTL; 100 ms later the
// child died, with elect0 in operations it never reached (a 1.412 s
// TTL), and a waiter got elect0 2.35 s after the child's death, within
// the first claim, flagged against the child's. A waiter past both
// claims with no live holder is still a violation, one.
func TestCheckCrashes_AWaiterMayBeKeptOutByAnyDeadProcess(t *testing.T) {
	p := params{Seed: 1, Clients: 3, Ops: 1, Kinds: []string{"election"}, Faults: []string{"crash", "child"}}
	s := &schedule{params: p, process: []int{0, 1, 2}, crashes: []crash{{Process: 0}, {Process: 1, Child: true}}}
	campaign := func(ttl time.Duration) op {
		return op{Kind: "election", Names: []string{"elect0"}, TTL: ttl, Wait: 3 * time.Second}
	}
	first := time.Now()
	judge := func(second time.Duration, ops [][]op, holds []hold) *outcome {
		t.Helper()
		procs := map[int]*process{2: {crash: newCrashState()}}
		for i, at := range []time.Time{first, first.Add(second)} {
			dead := &process{crash: newCrashState()}
			dead.crash.at = at
			close(dead.crash.dead)
			procs[i] = dead
		}
		s.ops = ops
		out := &outcome{params: p, injected: map[string]int{}}
		checkCrashes(s, procs, holds, nil, out)
		return out
	}

	// Seed 1795708793282320701: the child's claim, from its later death.
	childDied := first.Add(280 * time.Millisecond)
	childHeld := hold{client: 1, kind: "election", tokens: map[string]uint64{"elect0": 2}, asked: first.Add(100 * time.Millisecond),
		start: childDied.Add(-20 * time.Millisecond), end: childDied, crashed: true}
	onTime := hold{client: 2, kind: "election", tokens: map[string]uint64{"elect0": 3}, asked: first.Add(994 * time.Millisecond),
		start: childDied.Add(2711 * time.Millisecond), end: childDied.Add(2800 * time.Millisecond)}
	if out := judge(280*time.Millisecond, [][]op{{campaign(2126 * time.Millisecond)}, {campaign(2727 * time.Millisecond)}, {campaign(time.Second)}},
		[]hold{childHeld, onTime}); len(out.violations) != 0 {
		t.Errorf("a waiter within the claim of a process that died later: violations %q, want none", out.violations)
	}

	// Seed 1795708793282319951: the first process's claim, longer than
	// that of the child, which died after it.
	firstHeld := hold{client: 0, kind: "election", tokens: map[string]uint64{"elect0": 1}, asked: first.Add(-300 * time.Millisecond),
		start: first.Add(-200 * time.Millisecond), end: first, crashed: true}
	within := hold{client: 2, kind: "election", tokens: map[string]uint64{"elect0": 2}, asked: first.Add(1688 * time.Millisecond),
		start: first.Add(2445 * time.Millisecond), end: first.Add(2500 * time.Millisecond)}
	if out := judge(100*time.Millisecond, [][]op{{campaign(2633 * time.Millisecond)}, {campaign(1412 * time.Millisecond)}, {campaign(time.Second)}},
		[]hold{firstHeld, within}); len(out.violations) != 0 {
		t.Errorf("a waiter within the longer claim of a process that died earlier: violations %q, want none", out.violations)
	}

	// Past both claims, with no live holder: one violation.
	late := hold{client: 2, kind: "election", tokens: map[string]uint64{"elect0": 2}, asked: first.Add(1688 * time.Millisecond),
		start: first.Add(3500 * time.Millisecond), end: first.Add(3600 * time.Millisecond)}
	out := judge(100*time.Millisecond, [][]op{{campaign(2633 * time.Millisecond)}, {campaign(1412 * time.Millisecond)}, {campaign(time.Second)}},
		[]hold{firstHeld, late})
	if len(out.violations) != 1 || !strings.HasPrefix(out.violations[0], "crash:") {
		t.Errorf("a waiter past both dead claims: violations %q, want one crash violation", out.violations)
	}
	if n := out.injected["crash.waiter"] + out.injected["crash.child.waiter"]; n != 1 {
		t.Errorf("judged waits %d, want 1", n)
	}
}

// TestLinearCheck_AKilledWaiterMayBeHandedTheLockAfterItsDeath: the soak's
// run (seed 1795721477811378860): client 4 waited in a Lock of m2 behind
// client 5's hold until its process was killed, at 1836 ms; client 5's
// release, at 1879 ms, handed the lock to its registration, which a dead
// process leaves for three waiter refreshes; client 6's TryLock, at 2269
// ms, was refused. The failed Lock may take effect until its registration
// expires (failedBy), not only until its process died.
func TestLinearCheck_AKilledWaiterMayBeHandedTheLockAfterItsDeath(t *testing.T) {
	start := time.Now()
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	mutex := op{Kind: "mutex", Names: []string{"m2"}}
	dead := &process{crash: newCrashState()}
	close(dead.crash.dead)
	check := func(waiter *process) []string {
		rec := &leaseRecorder{start: start}
		rec.add(grantedCall(5, "client 5 op 1", mutex, at(208), at(209), 7, at(2500)))
		rec.refused(4, "client 4 op 4", mutex, at(279), waiter.failedBy(at(1836)), errKilled)
		rec.ended(5, "client 5 op 1", mutex, linear.Release, at(1879), at(1888), nil)
		rec.refused(6, "client 6 op 3", op{Kind: "mutex", Names: mutex.Names, Try: true}, at(2269), at(2273), dlock.ErrNotAcquired)
		var out outcome
		checkLinearizable(&schedule{}, rec, map[string]string{"m2": "mutex"}, nil, &out)
		return out.violations
	}
	if v := check(&process{crash: newCrashState()}); len(v) != 1 {
		t.Fatalf("a waiter whose process lives on, its Lock failed at 1836 ms: %d violations, want the refusal flagged", len(v))
	}
	if v := check(dead); len(v) != 0 {
		t.Fatalf("a waiter whose process was killed: %d violations\n%s", len(v), strings.Join(v, "\n"))
	}
}

// TestCheckCrashes_ALateWaitIsStarvedOnlyIfItsProcessWasStarvedEnough: a
// soak's crash check failed a waiter 113 ms past its bound at a load
// average of 9-15 (soak H, seed 1795734994283035775). A wait that ended
// past its bound is explained, and counted as starved, only where its
// process was starved for that lateness and crashSlack's scheduling on
// top; one starved less is still a violation.
func TestCheckCrashes_ALateWaitIsStarvedOnlyIfItsProcessWasStarvedEnough(t *testing.T) {
	p := params{Seed: 1, Clients: 2, Ops: 1, Kinds: []string{"mutex"}, Faults: []string{"crash"}}
	s := &schedule{params: p, process: []int{0, 1}, crashes: []crash{{Process: 0}}}
	lock := op{Kind: "mutex", Names: []string{"m"}, TTL: time.Second, Wait: 3 * time.Second}
	s.ops = [][]op{{lock}, {lock}}
	died := time.Now().Add(-time.Hour) // before the probes' first stamp: only the stalls below count
	late := 113 * time.Millisecond
	start := died.Add(time.Second + crashSlack + late)
	held := hold{client: 0, kind: "mutex", tokens: map[string]uint64{"m": 1}, start: died.Add(-time.Second), end: died, crashed: true}
	got := hold{client: 1, kind: "mutex", tokens: map[string]uint64{"m": 2}, asked: died, start: start, end: start.Add(time.Second)}
	{
		// Stalls while the claim held: they kept the waiter from nothing.
		claimed := &process{crash: newCrashState(), hook: newCommandFaults(1, 1, nil, nil), slowIsStarved: true}
		claimed.hook.slow.add(died.Add(100*time.Millisecond), died.Add(time.Second))
		out := &outcome{params: p, injected: map[string]int{}}
		dead := &process{crash: newCrashState()}
		dead.crash.at = died
		close(dead.crash.dead)
		checkCrashes(s, map[int]*process{0: dead, 1: claimed}, []hold{held, got}, nil, out)
		if out.starved != 0 || len(out.violations) != 1 {
			t.Errorf("a wait %v past its bound, its process starved only while the claim held: %d starved, violations %q; want a violation", late, out.starved, out.violations)
		}
	}
	for _, c := range []struct {
		stall     time.Duration
		starved   int
		violation bool
	}{
		{late + crashScheduling + 10*time.Millisecond, 1, false},
		{late + crashScheduling - 10*time.Millisecond, 0, true},
		{0, 0, true},
	} {
		dead := &process{crash: newCrashState()}
		dead.crash.at = died
		close(dead.crash.dead)
		waiter := &process{crash: newCrashState(), hook: newCommandFaults(1, 1, nil, nil), slowIsStarved: true}
		if c.stall > 0 {
			waiter.hook.slow.add(start.Add(-c.stall-time.Millisecond), start.Add(-time.Millisecond))
		}
		out := &outcome{params: p, injected: map[string]int{}}
		checkCrashes(s, map[int]*process{0: dead, 1: waiter}, []hold{held, got}, nil, out)
		if out.starved != c.starved || (len(out.violations) == 1) != c.violation || len(out.violations) > 1 {
			t.Errorf("a wait %v past its bound, its process starved %v: %d starved, violations %q; want %d starved, a violation %v",
				late, c.stall, out.starved, out.violations, c.starved, c.violation)
		}
	}
}

// TestCheckCrashes_AChildsClaimRunsFromWhenRedisMayStillApplyItsCall: a
// child killed while sending an attempt may have it applied up to
// childApplied after its death (Redis reads what the dead socket held
// when it gets to it), and the grant then holds for its TTL: its claim
// runs out that much later than an in-process crash's. A wait asked once
// every dead claim had run out was kept from nothing dead, and is not
// judged here (the explorer's soak, seed 1795742894877402283).
func TestCheckCrashes_AChildsClaimRunsFromWhenRedisMayStillApplyItsCall(t *testing.T) {
	p := params{Seed: 1, Clients: 2, Ops: 1, Kinds: []string{"multi"}, Faults: []string{"child"}}
	lock := op{Kind: "multi", Names: []string{"m1", "m2"}, TTL: time.Second, Wait: 5 * time.Second}
	died := time.Now().Add(-time.Hour) // before the probes' first stamp: no stall counts
	bound := died.Add(childApplied(&schedule{params: p}) + time.Second + crashSlack)
	for _, c := range []struct {
		what       string
		asked      time.Time
		start      time.Time
		violations int
	}{
		{"granted within the child's claim", died, bound.Add(-10 * time.Millisecond), 0},
		{"granted past the child's claim", died, bound.Add(10 * time.Millisecond), 1},
		{"asked once the claim ran out", bound.Add(-crashSlack + time.Millisecond), bound.Add(time.Second), 0},
	} {
		s := &schedule{params: p, process: []int{0, 1}, crashes: []crash{{Process: 0, Child: true}}}
		s.ops = [][]op{{lock}, {lock}}
		dead := &process{crash: newCrashState()}
		dead.crash.at = died
		close(dead.crash.dead)
		got := hold{client: 1, kind: "multi", tokens: map[string]uint64{"m1": 2, "m2": 2}, asked: c.asked, start: c.start, end: c.start.Add(time.Second)}
		out := &outcome{params: p, injected: map[string]int{}}
		checkCrashes(s, map[int]*process{0: dead, 1: {crash: newCrashState()}}, []hold{got}, nil, out)
		if len(out.violations) != c.violations {
			t.Errorf("%s: violations %q, want %d", c.what, out.violations, c.violations)
		}
	}
}
