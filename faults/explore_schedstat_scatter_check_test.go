//go:build faults

package faults

import (
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// TestStarved_ScatteredRunQueueWaitsDoNotExplainALoss: a server on a
// loaded machine waits a few ms for a CPU at each wake-up. Over a 300 ms
// TTL, 25 waits of 4 ms (each tick's run_delay, a sum of such waits,
// becomes one span at the tick's end) delay no renewal by more than 4 ms,
// far inside its margin (TTL/3, 100 ms): they cannot explain a lost
// lease. The measure adds them up to 100 ms, a third of the TTL, and
// starvedEnough (TTL/4) counts the loss as starvation, not a violation.
func TestStarved_ScatteredRunQueueWaitsDoNotExplainALoss(t *testing.T) {
	const ttl = 300 * time.Millisecond
	t0 := time.Now().Add(time.Hour) // where the probe has measured nothing
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	srv := new(redistest.Server)
	stalls := &serverStalls{logs: map[*redistest.Server]*stallLog{}}
	for ms := 12; ms <= 300; ms += 12 {
		stalls.logFor(srv).add(at(ms-4), at(ms))
	}
	p := &process{hook: newCommandFaults(1, 0, nil, nil), servers: stalls}
	if starved := p.starved(at(0), at(300)); starvedEnough(starved, ttl) {
		t.Errorf("waits of 4 ms at most: starved %v of the %v TTL, enough to excuse a loss", starved, ttl)
	}
}
