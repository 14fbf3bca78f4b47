package check

import (
	"slices"
	"sync"
	"time"
)

// Latencies collects durations and reports percentiles.
type Latencies struct {
	mu      sync.Mutex
	samples []time.Duration
}

// Add records one duration.
func (l *Latencies) Add(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples = append(l.samples, d)
}

// Count returns how many durations were recorded.
func (l *Latencies) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.samples)
}

// Percentile returns the p-th percentile (0 < p ≤ 100), or 0 with no samples.
func (l *Latencies) Percentile(p float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.samples) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(l.samples))
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
