//go:build faults

package faults

import (
	"math"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"
)

// TestLongestWait_TheLongestNewWaitsBucket: a tick's stall is the lower
// bound of the highest bucket that gained waits, at the tick's end; none
// under probeSlack, nor when no bucket gained.
func TestLongestWait_TheLongestNewWaitsBucket(t *testing.T) {
	now := time.Now()
	buckets := []float64{math.Inf(-1), 0, 0.001, 0.01, 0.1, math.Inf(1)}
	prev := []uint64{0, 5, 5, 5, 5}
	for _, c := range []struct {
		counts []uint64
		want   time.Duration // 0: no stall
	}{
		{[]uint64{0, 5, 5, 5, 5}, 0},
		{[]uint64{0, 9, 9, 5, 5}, 0},                     // waits under 10 ms
		{[]uint64{0, 9, 9, 6, 5}, 10 * time.Millisecond}, // one of 10-100 ms
		{[]uint64{0, 5, 5, 6, 6}, 100 * time.Millisecond},
	} {
		sp, ok := longestWait(&metrics.Float64Histogram{Counts: c.counts, Buckets: buckets}, prev, now)
		switch {
		case c.want == 0 && ok:
			t.Errorf("%v: stall %v, want none", c.counts, sp.to.Sub(sp.from))
		case c.want != 0 && (!ok || sp.to != now || sp.to.Sub(sp.from) != c.want):
			t.Errorf("%v: stall %v to %v (%v), want %v to the tick's end", c.counts, sp.from, sp.to, ok, c.want)
		}
	}
}

// TestGoroutineStalls_SeeGoroutinesWaitingToRun: with one P, twenty
// goroutines that spin take it in turns of 10 ms (the runtime's
// preemption), so a goroutine woken meanwhile waits about 200 ms to run;
// the sampler sees a stall of 50 ms at least.
func TestGoroutineStalls_SeeGoroutinesWaitingToRun(t *testing.T) {
	log := goroutineStalls()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	began := time.Now()
	stop := make(chan struct{})
	var spinners sync.WaitGroup
	for range 20 {
		spinners.Add(1)
		go func() {
			defer spinners.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	for range 20 { // wake-ups, to be counted
		time.Sleep(time.Millisecond)
	}
	close(stop)
	spinners.Wait()
	ended := time.Now()
	deadline := time.Now().Add(5 * time.Second)
	longest := func() (d time.Duration) {
		for _, s := range log.clipped(began, ended.Add(time.Second)) {
			d = max(d, s.to.Sub(s.from))
		}
		return d
	}
	for longest() < 50*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(schedTick)
	}
	t.Logf("spun for %v; the longest stall the sampler saw %v", ended.Sub(began).Round(time.Millisecond), longest())
	if longest() < 50*time.Millisecond {
		t.Errorf("the sampler's longest stall %v, want 50 ms at least", longest())
	}
}
