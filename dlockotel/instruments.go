package dlockotel

import (
	"errors"

	"go.opentelemetry.io/otel/metric"
)

// instruments are the metrics the observer records (see the package
// documentation for what each measures).
type instruments struct {
	acquireDuration metric.Float64Histogram
	holdDuration    metric.Float64Histogram
	held            metric.Int64UpDownCounter
	waiting         metric.Int64UpDownCounter
	renewals        metric.Int64Counter
	margin          metric.Float64Histogram
	lost            metric.Int64Counter
	extensions      metric.Int64Counter
	handover        metric.Float64Histogram
	leader          metric.Int64UpDownCounter
}

// Bucket boundaries, in seconds. An acquire takes a round trip (under a
// millisecond on a LAN) or waits for a holder (seconds, minutes); a hold
// lasts from milliseconds to hours; a margin is some share of a TTL (30 s
// by default); a hand-over is a round trip or two.
var (
	acquireBuckets  = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	holdBuckets     = []float64{0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400}
	marginBuckets   = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60}
	handoverBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5}
)

func (in *instruments) make(m metric.Meter) error {
	var errs []error
	seconds := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	upDown := func(name, unit, desc string) metric.Int64UpDownCounter {
		c, err := m.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	in.acquireDuration = seconds("dlock.acquire.duration", "Duration of acquire calls, from their start to their return.", acquireBuckets)
	in.holdDuration = seconds("dlock.hold.duration", "How long leases were held, from their acquire's return to their release or loss.", holdBuckets)
	in.held = upDown("dlock.held", "{lease}", "Leases held now.")
	in.waiting = upDown("dlock.waiting", "{call}", "Acquire calls registered as waiters now.")
	in.renewals = counter("dlock.lease.renewals", "{renewal}", "Automatic lease renewals, by result.")
	in.margin = seconds("dlock.lease.margin", "Time a lease had left when a renewal was confirmed.", marginBuckets)
	in.lost = counter("dlock.lease.lost", "{lease}", "Leases lost, by reason.")
	in.extensions = counter("dlock.lease.extensions", "{extension}", "Lease extensions asked for, by result.")
	in.handover = seconds("dlock.handover.duration", "From the start of a release to the next holder in this process holding.", handoverBuckets)
	in.leader = upDown("dlock.election.leader", "{leadership}", "Elections this process leads now.")
	return errors.Join(errs...)
}
