//go:build faults

package faults

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestWaitKillsOut_AFailoverSeenWhileWaitingIsWaitedOutToo: soak M's
// orphan (seed 1795762742435570184, a Sentinel failover run), the
// checker's. The settled checks waited out the claims from the planned
// kill; the Sentinel failed over on its own meanwhile, back to the old
// master, losing a release made after the planned failover, and the
// orphan check found that hold. The wait now starts again from a kill
// seen while it ran, and ends once none was.
func TestWaitKillsOut_AFailoverSeenWhileWaitingIsWaitedOutToo(t *testing.T) {
	planned := time.Unix(1_000_000, 0)
	sentinels := planned.Add(2 * time.Second)
	for _, tc := range []struct {
		what  string
		kills []time.Time // lastKill's answers, one a call; the last repeats
		want  []time.Time // the kills waited out
	}{
		{"none", []time.Time{{}}, nil},
		{"the planned one", []time.Time{planned}, []time.Time{planned}},
		{"the Sentinel's, seen while waiting", []time.Time{planned, sentinels}, []time.Time{planned, sentinels}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			calls := 0
			var waited []time.Time
			waitKillsOut(context.Background(), func() time.Time {
				k := tc.kills[min(calls, len(tc.kills)-1)]
				calls++
				return k
			}, func(killed time.Time) { waited = append(waited, killed) })
			if !slices.Equal(waited, tc.want) {
				t.Errorf("waited out %v; want %v", waited, tc.want)
			}
		})
	}
}
