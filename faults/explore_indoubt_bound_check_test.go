//go:build faults

package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/faults/linear"
)

// TestLinearCheck_AHoldInDoubtEndsWithinATTLOfItsCall: a Semaphore's Lock
// (client 0) marked in doubt returned its lease at 300 ms and released it;
// the grant it gave back before then lasted, at the latest, until its TTL
// ran out (1 s: a give-back whose release failed). Seconds later, with one
// of the two permits held (client 2), client 1's TryLock was refused: a
// permit held for nobody, a real defect, and a violation whether or not
// client 0's call was in doubt long before. The ghost hold recordInDoubt
// adds is of unknown outcome with nothing to end it: as a Permit it stays
// beside the permits taken after it, to the history's end, and excuses
// the refusal.
func TestLinearCheck_AHoldInDoubtEndsWithinATTLOfItsCall(t *testing.T) {
	start := time.Now()
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	sem := op{Kind: "semaphore", Names: []string{"s"}}
	granted := func(client int, owner string, call, ret time.Time, token uint64) leaseCall {
		return grantedCall(client, owner, sem, call, ret, token, ret.Add(time.Second))
	}
	check := func(inDoubt bool) []string {
		rec := &leaseRecorder{start: start}
		rec.add(granted(0, "client 0 op 0", at(0), at(300), 3))
		if inDoubt {
			rec.recordInDoubt(0, "client 0 op 0", sem, at(0), at(300))
		}
		rec.ended(0, "client 0 op 0", sem, linear.Release, at(400), at(410), nil)
		rec.add(granted(2, "client 2 op 0", at(4900), at(4910), 4))
		rec.refused(1, "client 1 op 0", op{Kind: "semaphore", Names: sem.Names, Try: true}, at(5000), at(5010), dlock.ErrNotAcquired)
		rec.ended(2, "client 2 op 0", sem, linear.Release, at(5500), at(5510), nil)
		var out outcome
		checkLinearizable(&schedule{}, rec, map[string]string{"s": "semaphore"}, nil, &out)
		return out.violations
	}
	if v := check(false); len(v) != 1 {
		t.Fatalf("without the hold in doubt: %d violations, want the refusal flagged\n%s", len(v), strings.Join(v, "\n"))
	}
	if v := check(true); len(v) != 1 {
		t.Fatalf("with a hold in doubt that ended 4.7 s before: %d violations, want the refusal flagged", len(v))
	}
}
