//go:build faults

package faults

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// TestTallyMutation_CountsTheWithheldProcessesLossesByVerdict: the
// mutation's tally counts checkHolds's verdicts on the losses of the
// withheld process's clients (client 0's, and client 1, which shares its
// process), and of no other.
func TestTallyMutation_CountsTheWithheldProcessesLossesByVerdict(t *testing.T) {
	defer func(was string) { *mutate = was }(*mutate)
	*mutate = "withhold"
	now := time.Now()
	lost := func(client int, starved time.Duration) hold {
		return hold{client: client, kind: "mutex", tokens: map[string]uint64{fmt.Sprint("n", client): 1},
			asked: now, start: now, end: now.Add(time.Second), lost: true,
			loss:    fmt.Errorf("%w (%w): no renewal confirmed before its deadline", dlock.ErrLeaseLost, dlock.LossUnreachable),
			starved: starved, ttl: time.Second, deadline: now.Add(time.Second), lossSeen: now.Add(time.Second)}
	}
	s := &schedule{params: params{Clients: 3}, process: []int{0, 0, 1}}
	out := &outcome{injected: map[string]int{}}
	checkHolds(s, []hold{lost(0, 0), lost(1, time.Second), lost(2, 0)}, nil, out)
	tallyMutation(s, out)
	if out.injected["mutate.caught"] != 1 || out.injected["mutate.starved"] != 1 || len(out.violations) != 2 {
		t.Errorf("tally %v, violations %q; want client 0's loss caught, client 1's starved, client 2's (another process) a violation not tallied",
			out.injected, out.violations)
	}
}
