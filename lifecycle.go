package dlock

import (
	"context"
	"fmt"
	"time"
)

// How a lease lives: its deadline, on two clocks; the timer that looks at
// it; the risk point half way; its renewals, whoever sends them (a Client's
// renewer, in a batch per node, see renewer.go; a Redlock's lease, on its
// own, see renewNow); and how it ends lost. Each is written once, for every
// kind of hold.

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

// deadlineLoss is how a lease that reached its deadline was lost:
// unreachable where renewals were due and none got through in time,
// expired where none were to be sent.
func (l *Lease) deadlineLoss() error {
	if l.rules.renew && !l.rules.renewalsStopped() {
		return errDeadlinePassed
	}
	return errRanOut
}

// lostError is how a lease ended lost: it matches [ErrLeaseLost] and its
// [LossReason].
type lostError struct {
	reason LossReason
	detail string
}

func (e *lostError) Error() string {
	return "dlock: lease lost (" + string(e.reason) + "): " + e.detail
}
func (e *lostError) Unwrap() []error { return []error{ErrLeaseLost, e.reason} }

// refusal is the loss an extend script's reply other than 1 tells (see
// the scripts' headers): 0 the hold is gone, -1 another owner holds the
// lock, -2 it was removed by force. Scripts that cannot tell say 0.
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
// Unlock has begun: its own release may be what Redis saw, and Unlock ends
// the lease as it finds.
func (l *Lease) refused() { l.refusedWith(errRenewalRefused) }

// refusedWith is refused with the loss Redis told.
func (l *Lease) refusedWith(err error) {
	if !l.releasing() {
		l.end(err)
	}
}

// confirmed sets the deadline after Redis confirmed an extension to ttl that
// was sent at sent (the caller holds extendMu), makes ttl what renewals ask
// for, and has the next renewal due a third of it after sent (one planned
// for a former, longer TTL would be too late for a shorter one). It may
// move the deadline in as well as out: the key now expires ttl after the
// extension arrived, whatever it had left before. A deadline that has
// already passed is not moved: from that moment the lease was reported
// lost, and stays so; the error says so (and the lease is ended here if no
// one has yet).
func (l *Lease) confirmed(sent time.Time, ttl time.Duration) error {
	l.mu.Lock()
	if l.finished() {
		err := l.err
		l.mu.Unlock()
		if err == nil {
			return fmt.Errorf("%w: %q was released meanwhile", ErrNotHeld, l.name)
		}
		return err
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

// inDoubt handles an Extend to ttl, sent at sent, whose outcome is not
// known yet, or never will be; a hold calls it as it sends one. Redis may
// have applied it, or may yet (a command waiting in a stalled server, a
// copy on its way), long before its reply arrives, and the lock may go to
// another meanwhile. A longer TTL changes nothing the lease counts on. A
// shorter one may have cut the key's life: the lease counts on no more
// than it would leave, and renews at that TTL from now on, so that the
// key lives as long as the lease counts on it whichever extension Redis
// applies last.
func (l *Lease) inDoubt(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	if l.finished() || ttl >= l.ttl {
		l.mu.Unlock()
		return
	}
	l.ttl = ttl
	if d := validUntil(sent, ttl, l.rules.drift).Add(-l.rules.slack); d.Before(l.deadline) {
		l.deadline = d
		if mid := halfWay(sent, d); mid.Before(l.riskAt) {
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

// leftAt is how long the lease has left at now (a reading of l.clock), by
// whichever of its deadline's clocks ends first; l.mu must be held. The
// wall clock goes on while the machine is suspended, the monotonic one
// does not: after a resume, only the wall clock knows that Redis's TTL
// has run on.
func (l *Lease) leftAt(now time.Time) time.Duration {
	return min(l.deadline.Sub(now), l.clock.Wall(l.deadline).Sub(l.clock.Wall(now)))
}

// expireIfPast ends the lease as lost when its deadline has passed. The
// deadline timer runs on the monotonic clock: after a suspension it fires
// late, and whoever looks first ends the lease.
func (l *Lease) expireIfPast() {
	l.mu.Lock()
	past := leaseHeld <= l.state && !l.finished() && l.leftAt(l.clock.Now()) <= 0
	l.mu.Unlock()
	if past {
		l.end(l.deadlineLoss())
	}
}

// checkDeadline runs when the lease's timer fires: at its risk point
// (see AtRisk), then at its deadline, unless a renewal moved them. (The
// timer runs on the machine's monotonic clock, which a suspended
// machine's stops: in a suspended process of the fault tests, it waits
// for the resume.)
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

// setDeadline counts the lease valid for validity from sent, when the
// acquire or extension that Redis confirmed was sent, and puts its risk
// point half way; l.mu must be held, or the lease not yet shared.
func (l *Lease) setDeadline(sent time.Time, validity time.Duration) {
	l.deadline = validUntil(sent, validity, l.rules.drift).Add(-l.rules.slack)
	l.riskAt = halfWay(sent, l.deadline)
}

// halfWay is the moment half way from sent to deadline.
func halfWay(sent, deadline time.Time) time.Time { return sent.Add(deadline.Sub(sent) / 2) }

// nextCheck is how long the lease's timer waits from now: to its risk
// point while an auto-renewed lease is not yet at risk, else to its
// deadline; l.mu must be held.
func (l *Lease) nextCheck(now time.Time) time.Duration {
	left := l.leftAt(now)
	if l.rules.renew && !l.risky() {
		return max(min(l.riskAt.Sub(now), left), 0)
	}
	return left
}

// AtRisk returns a channel that is closed once the lease is at risk: an
// auto-renewed lease with no renewal confirmed for half the time its last
// confirmation gave it. Renewals go every TTL/3, so two have failed or hang,
// while the lease still holds and a sixth of the TTL or more is left: the
// moment to checkpoint, or to start nothing that cannot be undone. It stays
// closed if a renewal then succeeds. A fixed lease's closes only on loss; a
// lost lease's closes before Done; a release does not close it. A
// [MultiLock]'s lease is at risk when any part is (docs/SAFETY.md).
func (l *Lease) AtRisk() <-chan struct{} {
	l.expireIfPast()
	l.mu.Lock()
	defer l.mu.Unlock()
	sig := l.signal()
	if sig.risk == nil {
		sig.risk = make(chan struct{})
		if sig.risky {
			close(sig.risk)
		}
	}
	return sig.risk
}

// setRisky marks the lease at risk once; l.mu must be held.
func (l *Lease) setRisky() {
	sig := l.signal()
	if sig.risky {
		return
	}
	sig.risky = true
	if sig.risk != nil {
		close(sig.risk)
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

// extendBusyRetry is how soon a renewal skipped for an Extend in flight is
// tried again.
const extendBusyRetry = 5 * time.Millisecond

// lockForRenewal takes extendMu for a renewal, unless an Extend is in
// flight (one extension of a lease at a time: the renewal is put back for
// a moment) or the lease has ended or its deadline has passed.
func (l *Lease) lockForRenewal() bool {
	switch {
	case !l.extendMu.TryLock():
		l.hold.renewAt(l.clock.Now().Add(extendBusyRetry))
		return false
	case l.heldLocally() != nil:
		// Renewing would not bring it back: a timer that has not fired
		// (the machine was suspended) finds it lost here.
		l.extendMu.Unlock()
		l.expireIfPast()
		return false
	}
	return true
}

// renewalAnswered applies the answer to a renewal to ttl sent at sent
// (the caller holds extendMu): confirmed, the next is due a third of ttl
// after it; refused (loss), the lease is lost; failed (err alone), it is
// tried again soon, well before the deadline: if none gets through, the
// deadline timer reports the loss. It returns the observer's report, with
// the margin the lease had left, for the caller to tell once it has
// released extendMu (a refusal's is told before the lease's End).
func (l *Lease) renewalAnswered(sent time.Time, ttl time.Duration, loss, err error) renewalReport {
	ob := l.observer()
	var due time.Time
	if ob != nil {
		due = l.Deadline()
	}
	switch {
	case loss != nil:
		report := ob.renewal(l.clock, due, RenewalRefused, err)
		if !l.releasing() && l.endTelling(loss, report) {
			return renewalReport{}
		}
		return report
	case err != nil:
		l.rules.log.Debug("dlock: renewal failed, retrying", "lock", l.name, "err", err)
		now := l.clock.Now()
		l.hold.renewAt(now.Add(max(l.Deadline().Sub(now)/4, 5*time.Millisecond)))
		return ob.renewal(l.clock, due, RenewalFailed, err)
	}
	if err := l.confirmed(sent, ttl); err != nil {
		return ob.renewal(l.clock, due, RenewalFailed, err)
	}
	return ob.renewal(l.clock, due, RenewalOK, nil)
}

// renewNow renews the lease on its own, bounded by its deadline: a
// Redlock's, whose renewal goes to every node.
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
