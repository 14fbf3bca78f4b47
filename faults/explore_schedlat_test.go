//go:build faults

package faults

import (
	"math"
	"runtime/metrics"
	"sync"
	"time"
)

// The probe (explore_starve_test.go) is woken by a timer, which the Go
// scheduler runs on the next schedule of the P that holds it. A goroutine
// woken by the network, as one reading a renewal's reply is, goes through
// the netpoller to the scheduler's global run queue, behind the other
// lanes' goroutines and the checkers' (porcupine runs for seconds on a
// busy name): on a loaded soak it can wait far longer than the probe
// does. The runtime counts that wait itself, the time goroutines spend
// runnable before they run (runtime/metrics' /sched/latencies:seconds, a
// histogram of a sample of them); the explorer reads it every schedTick,
// and a tick whose new waits reach probeSlack is a stall of its process
// as long as the longest of them, at the tick's end, at least (a bucket's
// lower bound). It is a wait of the process's goroutines, not of every
// one: a renewal's reader may have been run at once.

const schedLatencies = "/sched/latencies:seconds"

var (
	latenciesOnce sync.Once
	latencies     *stallLog // the explorer process's goroutines' longest waits to run, from its first run on
)

// goroutineStalls starts the sampler once, and returns its log.
func goroutineStalls() *stallLog {
	latenciesOnce.Do(func() {
		latencies = &stallLog{}
		go sampleLatencies(latencies)
	})
	return latencies
}

func sampleLatencies(log *stallLog) {
	sample := []metrics.Sample{{Name: schedLatencies}}
	var prev []uint64
	ticker := time.NewTicker(schedTick)
	defer ticker.Stop()
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindFloat64Histogram {
			return // not told by this runtime
		}
		h := sample[0].Value.Float64Histogram()
		now := time.Now()
		if prev != nil {
			if sp, ok := longestWait(h, prev, now); ok {
				log.add(sp.from, sp.to)
			}
		}
		prev = append(prev[:0], h.Counts...)
		<-ticker.C
	}
}

// longestWait is the stall that the waits counted in h since prev tell:
// the longest's bucket's lower bound, up to now; none under probeSlack.
func longestWait(h *metrics.Float64Histogram, prev []uint64, now time.Time) (span, bool) {
	for i := len(h.Counts) - 1; i >= 0; i-- {
		if i < len(prev) && h.Counts[i] == prev[i] {
			continue
		}
		low := h.Buckets[i]
		if math.IsInf(low, -1) || time.Duration(low*float64(time.Second)) < probeSlack {
			return span{}, false
		}
		return span{now.Add(-time.Duration(low * float64(time.Second))), now}, true
	}
	return span{}, false
}
