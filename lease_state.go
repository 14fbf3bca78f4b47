package dlock

import (
	"log/slog"
	"time"
)

// leaseState is where a lease is in its life. It changes only under the
// lease's mu, and only by a step leaseSteps allows (see Lease.step).
type leaseState uint8

const (
	// leaseUnconfirmed: a late grant (see startLease), idle until confirmGrant.
	leaseUnconfirmed leaseState = iota
	// leaseHandedOver: unconfirmed, from a release's hand-over: its deadline
	// counts from the waiter's last attempt, so confirmGrant ignores it.
	leaseHandedOver
	leaseHeld      // running: its deadline timer, and its renewals if auto-renewed
	leaseReleasing // an Unlock sent its release: renewals stop counting
	leaseEnding    // end has begun, err set: only its first call counts
	leaseEnded     // released or lost: err says which
	// leaseReleased: ended, and a release of ours succeeded (even after a
	// loss): another Unlock is refused: the mark would take it for a resend.
	leaseReleased
)

// leaseSteps are the legal steps: each state's next states, as a bit set.
var leaseSteps = [...]uint8{
	leaseUnconfirmed: 1<<leaseHandedOver | 1<<leaseHeld | 1<<leaseReleasing | 1<<leaseEnding,
	leaseHandedOver:  1<<leaseHeld | 1<<leaseReleasing | 1<<leaseEnding,
	leaseHeld:        1<<leaseReleasing | 1<<leaseEnding,
	leaseReleasing:   1 << leaseEnding,
	leaseEnding:      1 << leaseEnded,
	leaseEnded:       1 << leaseReleased,
	leaseReleased:    0,
}

// step moves the lease to next if leaseSteps allows it from where it is,
// and reports whether it did; l.mu must be held, or the lease not shared.
func (l *Lease) step(next leaseState) bool {
	if leaseSteps[l.state]&(1<<next) == 0 {
		return false
	}
	l.state = next
	return true
}

func (l *Lease) stepLocked(next leaseState) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.step(next)
}

func (l *Lease) finished() bool { return l.state >= leaseEnded }

// reached reports whether the lease is at s or past it, under l.mu.
func (l *Lease) reached(s leaseState) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state >= s
}

// releasing: an Unlock began or the lease is ending; renewals don't count.
func (l *Lease) releasing() bool { return l.reached(leaseReleasing) }

// leaseRules are what the leases of one handle (or RedlockMutex) share.
type leaseRules struct {
	log     *slog.Logger
	drift   float64
	slack   time.Duration // given up besides TTL × drift (a Redlock's 2 ms)
	renew   bool          // renewed automatically (a MultiLock's, through its parts): AtRisk watches its renewals
	renewer *renewer      // its Client's, whose Close stops its renewals; nil for a Redlock's
	heldKey any           // what Lease.Context carries the hold under (see ownerFor); nil but for a read-write lock
}

// leaseSignals are what a lease tells, and to whom, under its mu: made on
// first use, as most leases are unlocked with nobody waiting on them.
type leaseSignals struct {
	done  chan struct{} // made by the first Done, closed once finished
	risk  chan struct{} // made by the first AtRisk, closed once risky
	onEnd map[*func(error)]struct{}
	whole *partsHold // of a MultiLock's part: the whole, whose deadline and risk follow the parts'
	risky bool       // at risk (see AtRisk), or lost
}

// signal is l's signals, made if need be; l.mu must be held.
func (l *Lease) signal() *leaseSignals {
	if l.signals == nil {
		l.signals = &leaseSignals{}
	}
	return l.signals
}

// made is *ch, made on first use, closed if it is made after the fact.
func made(ch *chan struct{}, closed bool) chan struct{} {
	if *ch == nil {
		*ch = make(chan struct{})
		if closed {
			close(*ch)
		}
	}
	return *ch
}

// risky reports whether the lease is at risk or lost; l.mu must be held.
func (l *Lease) risky() bool { return l.signals != nil && l.signals.risky }

// whole is the MultiLock's hold l is a part of, if any; l.mu must be held.
func (l *Lease) whole() *partsHold {
	if l.signals == nil {
		return nil
	}
	return l.signals.whole
}
