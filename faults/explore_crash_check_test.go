//go:build faults

package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
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
