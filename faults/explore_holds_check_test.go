//go:build faults

package faults

import (
	"testing"
	"time"
)

// TestCheckHolds_AHoldItsHolderWokeTooLateForIsNoOverlap: a lease returned
// valid the moment its process was suspended, and run out before the
// process resumed, held nothing its holder could act on: its hold ends
// (at its deadline) before it starts (at the resume). The overlap and
// token-order checks flagged it against the holds Redis granted meanwhile;
// a hold that did last is still judged.
func TestCheckHolds_AHoldItsHolderWokeTooLateForIsNoOverlap(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	asleep := hold{client: 0, kind: "mutex", tokens: map[string]uint64{"m": 100}, asked: at(0), start: at(3800), end: at(900)}
	meanwhile := hold{client: 1, kind: "mutex", tokens: map[string]uint64{"m": 200}, asked: at(1000), start: at(1100), end: at(4000)}
	out := &outcome{injected: map[string]int{}}
	checkHolds(&schedule{}, []hold{asleep, meanwhile}, nil, out)
	if len(out.violations) != 0 {
		t.Errorf("a hold run out before its holder woke: %q", out.violations)
	}

	lasted := asleep
	lasted.end = at(4500)
	out = &outcome{injected: map[string]int{}}
	checkHolds(&schedule{}, []hold{lasted, meanwhile}, nil, out)
	if len(out.violations) == 0 {
		t.Error("a hold that lasted past another's start, with a lower token: no violation")
	}
}
