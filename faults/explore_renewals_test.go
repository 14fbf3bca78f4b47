//go:build faults

package faults

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlockio/dlock/observe"
)

// An unexplained loss says how its lease ran out: what came of its last
// renewals, and when, from the Client's Observer. A renewal confirmed
// with a healthy margin (about two thirds of the TTL) and then nothing
// until the deadline is a renewer not run, or a renewal that never came
// back; a failed one names its error. It explains no loss; it tells the
// next one to look where.

// renewalsKept: the last renewals of a lease kept, enough for its last
// TTL and the one before.
const renewalsKept = 8

type leaseKey struct {
	name  string
	token uint64
}

// renewalSeen is one renewal's outcome, when the Observer was told it.
type renewalSeen struct {
	at     time.Time
	result observe.RenewalResult
	margin time.Duration
	err    error
}

// leaseRenewals are a process's leases' last renewals.
type leaseRenewals struct {
	mu      sync.Mutex
	byLease map[leaseKey][]renewalSeen
}

func newLeaseRenewals() *leaseRenewals {
	return &leaseRenewals{byLease: map[leaseKey][]renewalSeen{}}
}

// observe is an Observer's Renewal.
func (r *leaseRenewals) observe(ev observe.RenewalEvent) {
	seen := renewalSeen{at: time.Now(), result: ev.Result, margin: ev.Margin, err: ev.Err}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := leaseKey{ev.Name, ev.Token}
	r.byLease[k] = append(r.byLease[k], seen)
	if n := len(r.byLease[k]); n > renewalsKept {
		r.byLease[k] = slices.Delete(r.byLease[k], 0, n-renewalsKept)
	}
}

// before tells the lease's renewals, each timed from deadline, those of
// each of its locks (a MultiLock's), with when it was acquired.
func (r *leaseRenewals) before(tokens map[string]uint64, acquired, deadline time.Time) string {
	if r == nil {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ms := func(t time.Time) string { return t.Sub(deadline).Round(time.Millisecond).String() }
	var b strings.Builder
	fmt.Fprintf(&b, "acquired %s from its deadline;", ms(acquired))
	names := make([]string, 0, len(tokens))
	for name := range tokens {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		seen := r.byLease[leaseKey{name, tokens[name]}]
		fmt.Fprintf(&b, " %s's renewals:", name)
		if len(seen) == 0 {
			b.WriteString(" none told")
		}
		for _, s := range seen {
			fmt.Fprintf(&b, " %s %s", ms(s.at), s.result)
			if s.result == observe.RenewalOK {
				fmt.Fprintf(&b, " (margin %v)", s.margin.Round(time.Millisecond))
			} else if s.err != nil {
				fmt.Fprintf(&b, " (%v)", s.err)
			}
			b.WriteString(",")
		}
	}
	return strings.TrimSuffix(b.String(), ",")
}
