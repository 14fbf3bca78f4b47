//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestFailoverWindows_AnUnplannedFailoverMayUndoWhatItsOldMasterApplied: a
// failover the Sentinel made on its own is seen at its switch; its old
// master took writes until its clients heard of it, any of which its
// replica may not have had. A soak's run (seed 1795718155730351553) flagged
// a late copy granted after its call's abandon, whose tombstone such a
// failover had lost: the window ended where it began, 3 s before the
// switch, and excused no write.
func TestFailoverWindows_AnUnplannedFailoverMayUndoWhatItsOldMasterApplied(t *testing.T) {
	at := time.Now()
	e := &failoverEnv{made: map[string]int{}}
	e.unplanned(at)
	for _, c := range []struct {
		write time.Time
		lost  bool
	}{
		{at.Add(-unplannedBefore - time.Second), false},
		{at.Add(-time.Second), true},
		{at, true},
		{at.Add(unplannedAfter / 2), true},
		{at.Add(unplannedAfter + time.Second), false},
	} {
		if got := e.mayBeUndone(c.write, c.write); got != c.lost {
			t.Errorf("a write %v from the switch: may be undone %v, want %v", c.write.Sub(at), got, c.lost)
		}
	}
	if !e.mayHaveFailed(at.Add(-time.Second), at.Add(-time.Second)) {
		t.Error("a call a second before the switch: want it may have met no master")
	}
}

// TestFailedFailover_ASentinelWithNoGoodReplicaIsTheHarnesss: a soak's run
// (seed 1795718155730353842) failed on the Sentinel's NOGOODSLAVE for the
// whole 30 s the explorer asks, and another (seed 1795753691127166761, at
// a load average of 60) had no answer to SENTINEL FAILOVER in that time:
// no fault made, counted apart; another failure to fail over stays a
// violation.
func TestFailedFailover_ASentinelWithNoGoodReplicaIsTheHarnesss(t *testing.T) {
	var out outcome
	failedFailover(&out, errors.New("promoting the replica: SENTINEL FAILOVER: NOGOODSLAVE No suitable replica to promote, until context deadline exceeded"))
	if len(out.violations) != 0 || out.unmade != 1 {
		t.Errorf("NOGOODSLAVE: violations %v, unmade %d; want none, 1", out.violations, out.unmade)
	}
	out = outcome{}
	failedFailover(&out, fmt.Errorf("promoting the replica: SENTINEL FAILOVER: %w", context.DeadlineExceeded))
	if len(out.violations) != 0 || out.unmade != 1 {
		t.Errorf("no answer to SENTINEL FAILOVER: violations %v, unmade %d; want none, 1", out.violations, out.unmade)
	}
	out = outcome{}
	failedFailover(&out, errors.New("rejoining the old master: restarting the old master on port 1: refused"))
	if len(out.violations) != 1 || out.unmade != 0 {
		t.Errorf("a failed rejoin: violations %v, unmade %d; want one, 0", out.violations, out.unmade)
	}
}
