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

// TestGoroutineStalls_SeeGoroutinesWaitingToRun: with one P taken in
// turns by twenty goroutines that spin, a goroutine woken meanwhile waits
// about 200 ms to run; the sampler sees a stall of 50 ms at least.
func TestGoroutineStalls_SeeGoroutinesWaitingToRun(t *testing.T) {
	log := goroutineStalls()
	began, ended := spinOneP(func() {
		for end := time.Now().Add(time.Second); time.Now().Before(end); {
			time.Sleep(time.Millisecond) // wake-ups, to be counted
		}
	})
	longest := awaitStall(log, began, ended, 50*time.Millisecond)
	t.Logf("spun for %v; the sampler's longest stall %v", ended.Sub(began).Round(time.Millisecond), longest)
	if longest < 50*time.Millisecond {
		t.Errorf("the sampler's longest stall %v, want 50 ms at least", longest)
	}
}

// spinOneP runs meanwhile with the process down to one P, which twenty
// goroutines that spin take in turns of 10 ms (the runtime's preemption),
// and says when that began and ended.
func spinOneP(meanwhile func()) (began, ended time.Time) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	began = time.Now()
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
	meanwhile()
	close(stop)
	spinners.Wait()
	return began, time.Now()
}

// awaitStall is the longest of log's stalls that began in [began, ended],
// once one of want is logged or 5 s have passed: a stall is logged when
// it ends, and the sampler may run late on a loaded machine.
func awaitStall(log *stallLog, began, ended time.Time, want time.Duration) time.Duration {
	longest := func() (d time.Duration) {
		for _, s := range log.clipped(began, ended.Add(time.Second)) {
			d = max(d, s.to.Sub(s.from))
		}
		return d
	}
	deadline := time.Now().Add(5 * time.Second)
	for longest() < want && time.Now().Before(deadline) {
		time.Sleep(probeTick)
	}
	return longest()
}
