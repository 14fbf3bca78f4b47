package dlock

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/dlockio/dlock/observe"
)

// How a lease lives, for every hold: deadline, timer, risk, renewals, loss.

var (
	errDeadlinePassed   = &lostError{LossUnreachable, "no renewal confirmed before its deadline"}
	errRanOut           = &lostError{LossExpired, "it ran out, with no renewal due (a fixed lease time, or its Client closed)"}
	errConfirmedLate    = &lostError{LossUnreachable, "the extension was confirmed after the lease's deadline"}
	errUnlockIncomplete = &lostError{LossUnreachable, "unlock did not complete"}
	errRenewalRefused   = &lostError{LossExpired, "the lock expired, was deleted or is held by another owner"}
	errLostGone         = &lostError{LossExpired, "the lock expired or was deleted"}
	errLostTaken        = &lostError{LossTaken, "another owner holds the lock"}
	errLostForced       = &lostError{LossForced, "the lock was removed by force"}
)

// deadlineLoss is the loss at the deadline: expired if no renewal was due.
func (l *Lease) deadlineLoss() error {
	r := l.rules.renewer
	if !l.rules.renew || r != nil && r.ctx.Err() != nil {
		return errRanOut
	}
	return errDeadlinePassed
}

// lostError is a lease's loss: it matches [ErrLeaseLost] and its [LossReason].
type lostError struct {
	reason LossReason
	detail string
}

func (e *lostError) Error() string {
	return "dlock: lease lost (" + string(e.reason) + "): " + e.detail
}
func (e *lostError) Unwrap() []error { return []error{ErrLeaseLost, e.reason} }

// refusal is the loss an extend script's reply other than 1 tells.
func refusal(reply int64) error {
	switch reply {
	case -1:
		return errLostTaken
	case -2:
		return errLostForced
	}
	return errLostGone
}

// refused ends the lease as lost after Redis said it is not ours, unless an
// Unlock has begun: its own release may be what Redis saw.
func (l *Lease) refused() { l.refusedWith(errRenewalRefused, renewalReport{}) }

// refusedWith is refused with the loss Redis told; it reports as endTelling.
func (l *Lease) refusedWith(loss error, first renewalReport) bool {
	return !l.releasing() && l.endTelling(loss, first)
}

// confirmed moves the deadline, in or out, after Redis confirmed an
// extension to ttl sent at sent (the caller holds extendMu), and renews
// ttl/3 after sent. A passed deadline stays: the lease was reported lost.
func (l *Lease) confirmed(sent time.Time, ttl time.Duration) error {
	l.mu.Lock()
	if l.finished() {
		err := l.err
		l.mu.Unlock()
		return cmp.Or(err, fmt.Errorf("%w: %q was released meanwhile", ErrNotHeld, l.name))
	}
	if l.leftAt(l.clock.Now()) <= 0 {
		l.mu.Unlock()
		l.end(errConfirmedLate)
		return errConfirmedLate
	}
	l.ttl = ttl
	l.setDeadline(sent, ttl)
	l.deadlineMoved()
	l.renewAt(sent.Add(ttl / 3))
	return nil
}

// inDoubt handles an Extend to ttl, sent at sent, as a hold sends it:
// Redis may apply it any time before its reply. A shorter ttl may cut the
// key's life: the lease counts on no more than it leaves, renewing at ttl.
func (l *Lease) inDoubt(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	if l.finished() || ttl >= l.ttl {
		l.mu.Unlock()
		return
	}
	l.ttl = ttl
	if d := validUntil(sent, ttl, l.rules.drift).Add(-l.rules.slack); d.Before(l.deadline) {
		l.deadline = d
		if mid := sent.Add(d.Sub(sent) / 2); mid.Before(l.riskAt) {
			l.riskAt = mid
		}
		l.deadlineMoved()
	} else {
		l.mu.Unlock()
	}
	l.renewAt(sent.Add(ttl / 3))
}

// deadlineMoved sets the timer to the moved deadline and unlocks l.mu; a
// MultiLock's part then moves its whole's.
func (l *Lease) deadlineMoved() {
	if l.timer != nil {
		l.timer.Reset(l.nextCheck(l.clock.Now()))
	}
	whole := l.whole()
	l.mu.Unlock()
	if whole != nil {
		whole.partMoved()
	}
}

// leftAt is the time left at now by whichever clock ends first: after a
// suspension only the wall clock knows Redis's TTL ran on. l.mu held.
func (l *Lease) leftAt(now time.Time) time.Duration {
	return min(l.deadline.Sub(now), l.clock.Wall(l.deadline).Sub(l.clock.Wall(now)))
}

// expireIfPast ends the lease as lost when its deadline has passed: after a
// suspension the timer fires late, and whoever looks first ends it.
func (l *Lease) expireIfPast() {
	l.mu.Lock()
	past := leaseHeld <= l.state && !l.finished() && l.leftAt(l.clock.Now()) <= 0
	l.mu.Unlock()
	if past {
		l.end(l.deadlineLoss())
	}
}

// checkDeadline runs when the lease's timer fires: at its risk point, then
// at its deadline. In a suspended test process it waits for the resume.
func (l *Lease) checkDeadline() {
	l.clock.Wait()
	l.mu.Lock()
	if l.finished() {
		l.mu.Unlock()
		return
	}
	now := l.clock.Now()
	left := l.leftAt(now)
	if left <= 0 {
		l.mu.Unlock()
		l.end(l.deadlineLoss())
		return
	}
	atRisk := l.rules.renew && !l.risky() && !now.Before(l.riskAt)
	if atRisk {
		l.setRisky()
	}
	l.timer.Reset(l.nextCheck(now))
	whole := l.whole()
	l.mu.Unlock()
	if atRisk {
		l.rules.log.Warn("dlock: lease at risk: no renewal confirmed for half its time", "lock", l.name, "token", l.token, "left", left)
		if whole != nil {
			whole.lease.markRisky()
		}
	}
}

// setDeadline counts the lease valid for validity from sent, the risk point
// half way; l.mu must be held, or the lease not yet shared.
func (l *Lease) setDeadline(sent time.Time, validity time.Duration) {
	l.deadline = validUntil(sent, validity, l.rules.drift).Add(-l.rules.slack)
	l.riskAt = sent.Add(l.deadline.Sub(sent) / 2)
}

// nextCheck is how long the timer waits: to the risk point while an
// auto-renewed lease is not at risk, else to the deadline; l.mu held.
func (l *Lease) nextCheck(now time.Time) time.Duration {
	left := l.leftAt(now)
	if l.rules.renew && !l.risky() {
		return max(min(l.riskAt.Sub(now), left), 0)
	}
	return left
}

// AtRisk returns a channel that is closed once an auto-renewed lease had no
// renewal confirmed for half the time its last confirmation gave it: two
// renewals failed, a sixth of the TTL or more is left. Checkpoint then, or
// start nothing that cannot be undone. It stays closed; a fixed lease's
// closes only on loss, before Done; a release does not close it. A
// [MultiLock]'s lease is at risk when any part is.
func (l *Lease) AtRisk() <-chan struct{} {
	l.expireIfPast()
	l.mu.Lock()
	defer l.mu.Unlock()
	sig := l.signal()
	return made(&sig.risk, sig.risky)
}

// setRisky marks the lease at risk once; l.mu must be held.
func (l *Lease) setRisky() {
	if sig := l.signal(); !sig.risky {
		sig.risky = true
		if sig.risk != nil {
			close(sig.risk)
		}
	}
}

// markRisky marks the lease at risk (a MultiLock's, from a part).
func (l *Lease) markRisky() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.finished() {
		l.setRisky()
	}
}

// lockForRenewal takes extendMu for a renewal, unless an Extend is in
// flight (the renewal is put back) or the lease has ended.
func (l *Lease) lockForRenewal() bool {
	switch {
	case !l.extendMu.TryLock():
		l.hold.renewAt(l.clock.Now().Add(5 * time.Millisecond))
		return false
	case l.heldLocally() != nil: // a timer late after a suspension: it is lost here
		l.extendMu.Unlock()
		l.expireIfPast()
		return false
	}
	return true
}

// renewalAnswered applies the answer to a renewal sent at sent (the caller
// holds extendMu): refused, the lease is lost; failed, it is retried well
// before the deadline. Its report is told after extendMu is released.
func (l *Lease) renewalAnswered(sent time.Time, ttl time.Duration, loss, err error) renewalReport {
	ob := l.observer()
	due := l.Deadline() // the Margin's end, read before the answer moves it
	switch {
	case loss != nil:
		report := ob.renewal(l.clock, due, observe.RenewalRefused, err)
		if l.refusedWith(loss, report) {
			return renewalReport{}
		}
		return report
	case err != nil:
		l.rules.log.Debug("dlock: renewal failed, retrying", "lock", l.name, "err", err)
		now := l.clock.Now()
		l.hold.renewAt(now.Add(max(l.Deadline().Sub(now)/4, 5*time.Millisecond)))
		return ob.renewal(l.clock, due, observe.RenewalFailed, err)
	}
	if err := l.confirmed(sent, ttl); err != nil {
		return ob.renewal(l.clock, due, observe.RenewalFailed, err)
	}
	return ob.renewal(l.clock, due, observe.RenewalOK, nil)
}

// renewNow renews a Redlock's lease on its own, bounded by its deadline.
func (l *Lease) renewNow() {
	l.clock.Wait() // its timer's, as checkDeadline's
	if l.releasing() || !l.lockForRenewal() {
		return
	}
	ttl := l.currentTTL()
	sent := l.clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), l.Deadline().Sub(sent))
	defer cancel()
	loss, err := l.hold.extend(ctx, ttl, time.Time{})
	report := l.renewalAnswered(sent, ttl, loss, err)
	l.extendMu.Unlock()
	report.tell()
}
