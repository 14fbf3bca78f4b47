//go:build faults

package faults

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dlockio/dlock/observe"
)

// The slowobserver fault: each process's Observer takes 1–8 ms to be told
// a renewal, and one time in three blocks for as long as a TTL (0.3–3 s),
// as an exporter stuck on the network would (issue 33); it takes 1–8 ms
// to be told a lease's end. A hook must cost no lease its renewal, so the
// fault costs none: a quiet run stays quiet.

// slowObserverStream is the key of the stream the fault is drawn from,
// and its processes' delays: under it, no CI seed draws it
// (TestExplore_SlowObserverKeepsTheCISchedules).
const slowObserverStream = 0x5108

// slowObserverRate: a slow observer comes in one run in slowObserverRate.
const slowObserverRate = 4

// drawSlowObserver draws whether the run's observers are slow, from a
// stream of its own, so every seed keeps the schedule it had without it.
func (p *params) drawSlowObserver(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, slowObserverStream))
	if rng.IntN(slowObserverRate) == 0 {
		p.Faults = append(p.Faults, "slowobserver")
	}
}

// slowRenewals is hook told slowly, with delays drawn for the process.
func slowRenewals(seed uint64, process int, hook func(observe.RenewalEvent)) func(observe.RenewalEvent) {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, slowObserverStream+uint64(process)+1))
	return func(ev observe.RenewalEvent) {
		mu.Lock()
		delay := time.Duration(1+rng.IntN(8)) * time.Millisecond
		if rng.IntN(3) == 0 { // as long as a TTL (see drawOp)
			delay = time.Duration(300+rng.IntN(2700)) * time.Millisecond
		}
		mu.Unlock()
		time.Sleep(delay) // the fault itself, not a synchronisation
		hook(ev)
	}
}

// slowEnds is an End hook that takes 1–8 ms, drawn for the process from a
// stream of its own (the Renewal hook's delays stay as they were): told on
// the Unlock's goroutine, it may delay that Unlock, and no other lease.
func slowEnds(seed uint64, process int) func(observe.LeaseEnd) {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, slowObserverStream+uint64(process)+1000))
	return func(observe.LeaseEnd) {
		mu.Lock()
		delay := time.Duration(1+rng.IntN(8)) * time.Millisecond
		mu.Unlock()
		time.Sleep(delay) // the fault itself, not a synchronisation
	}
}

// TestExplore_SlowObserverKeepsTheCISchedules: under slowObserverStream no
// drawn CI seed draws the fault, so each keeps the schedule that caught
// what it caught (a CI case runs one), and about one run in
// slowObserverRate does.
func TestExplore_SlowObserverKeepsTheCISchedules(t *testing.T) {
	for _, seed := range ciSeeds {
		if p := randomParams(seed, maxClients()); p.has("slowobserver") {
			t.Errorf("CI seed %d draws a slow observer: %s", seed, p)
		}
	}
	drawn := 0
	for seed := uint64(1000); seed < 5000; seed++ {
		if randomParams(seed, 16).has("slowobserver") {
			drawn++
		}
	}
	if want := 4000 / slowObserverRate; drawn < want*8/10 || drawn > want*12/10 {
		t.Errorf("%d of 4000 runs draw a slow observer; want about %d", drawn, want)
	}
}
