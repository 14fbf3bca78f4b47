// Package observe holds the types with which a program watches dlock's
// locks: an [Observer] of hooks and the events they are told, as
// net/http/httptrace is to net/http. Give an Observer to
// dlock.WithObserver; dlockotel makes OpenTelemetry metrics and spans of
// it. [Kind] and [LossReason] live here because events carry them.
package observe

import (
	"context"
	"time"
)

// Observer is told what happens to locks. Every field is optional; unset,
// it costs nothing. The hooks run on the goroutine doing the work: they
// must be quick, must not block or call back into dlock; several may run
// at once. A hook's panic reaches the caller once the lease involved was
// released and the waiter withdrawn. Events carry lock names (group them
// before they become metric attributes), never owner tokens.
type Observer struct {
	// Acquire is called as an acquire call with valid arguments begins (a
	// call with bad arguments returns dlock.ErrInvalid unobserved). It
	// returns the context the call, its Wait events and its commands go on
	// with (ctx or one derived from it); done, if not nil, is called once
	// as the call returns.
	Acquire func(ctx context.Context, call AcquireCall) (_ context.Context, done func(AcquireDone))

	// Wait is called as a waiting call registers, is handed the lock, or
	// tries again; ctx is the one Acquire returned (or derived from it).
	Wait func(ctx context.Context, ev WaitEvent)

	// Release is called as dlock.Lease.Unlock (or Election.Resign) begins;
	// its context and done are as Acquire's, done after the lease's End.
	Release func(ctx context.Context, lease LeaseInfo) (_ context.Context, done func(error))

	// Renewal is called with the outcome of each automatic renewal.
	Renewal func(ev RenewalEvent)

	// Extend is called with the outcome of each dlock.Lease.Extend.
	Extend func(ev ExtendEvent)

	// End is called once per lease returned to a caller, as it ends:
	// released (on the Unlock's goroutine, before dlock.Lease.Done closes)
	// or lost (after, on a goroutine of its own: it cannot delay the loss).
	End func(ev LeaseEnd)

	// Leader is called when a dlock.Election candidate of this process
	// starts to lead (Campaign returns) and when that leadership ends.
	Leader func(ev LeaderEvent)
}

// AcquireCall is one acquire call as it begins.
type AcquireCall struct {
	Kind Kind
	Name string // the lock's name; a MultiLock's names, sorted, joined by commas
	Try  bool   // a single attempt (TryLock…, or dlock.WithWait(0)): it never waits
}

// Outcome is how an acquire call ended.
type Outcome string

// The outcomes of an acquire call.
const (
	// OutcomeAcquired: the call returned a lease.
	OutcomeAcquired Outcome = "acquired"
	// OutcomeNotAcquired: the lock was held for as long as the call would
	// try (the error matches dlock.ErrNotAcquired).
	OutcomeNotAcquired Outcome = "not_acquired"
	// OutcomeCanceled: the caller's context was cancelled.
	OutcomeCanceled Outcome = "canceled"
	// OutcomeError: anything else (Redis failed or was unreachable until
	// the call's end, a wrong-type key…).
	OutcomeError Outcome = "error"
)

// AcquireDone is how an acquire call ended.
type AcquireDone struct {
	Outcome Outcome
	Token   uint64 // the lease's fencing token, when acquired
	Waited  bool   // the call registered as a waiter at some point
	Err     error  // what the call returned
}

// WaitStep is what a waiting call did.
type WaitStep string

// The steps of a wait.
const (
	// WaitRegistered: refused, the call registered to be woken by a
	// release (reported once per call).
	WaitRegistered WaitStep = "registered"
	// WaitHandedOver: a release handed the lock to the call, which holds
	// it without asking again (Mutex, FairMutex).
	WaitHandedOver WaitStep = "handed_over"
	// WaitRetry: the call attempts again. A release that did not hand it the
	// lock woke it, or it reached its waiter refresh or the holder's expiry,
	// or an attempt failed, or it gave back a grant (Err). Such a grant was
	// unconfirmed, or handed over while its subscription was lost: either may
	// have held the lock a while, for no lease.
	WaitRetry WaitStep = "retry"
)

// WaitEvent is a step of a waiting acquire call.
type WaitEvent struct {
	Kind Kind
	Name string
	Step WaitStep
	Err  error // for a retry, what the attempt before it failed with, if it did
}

// LeaseInfo names a lease in events.
type LeaseInfo struct {
	Kind  Kind
	Name  string
	Token uint64 // the fencing token (a MultiLock's: its first lock's)
}

// RenewalResult is what came of a renewal or an extension.
type RenewalResult string

// The results of a renewal or extension.
const (
	// RenewalOK: Redis confirmed it in time.
	RenewalOK RenewalResult = "ok"
	// RenewalRefused: Redis said the hold is not ours: the lease is lost.
	RenewalRefused RenewalResult = "refused"
	// RenewalFailed: no confirmation in time (an error, a timeout, a reply
	// after the deadline); a renewal is tried again until the deadline.
	RenewalFailed RenewalResult = "failed"
)

// RenewalEvent is the outcome of one automatic renewal of a lease.
type RenewalEvent struct {
	LeaseInfo
	Result RenewalResult
	// Margin is how long the lease had left when the renewal was confirmed
	// (RenewalOK): about two thirds of the TTL when healthy; a margin
	// falling toward zero warns of a loss.
	Margin time.Duration
	Err    error // for a failed renewal, why
}

// ExtendEvent is the outcome of one dlock.Lease.Extend.
type ExtendEvent struct {
	LeaseInfo
	TTL    time.Duration // asked for
	Result RenewalResult
	Err    error // what Extend returned
}

// LeaseEnd is a lease's end.
type LeaseEnd struct {
	LeaseInfo
	Held time.Duration // from the acquire call's return to the end
	Lost LossReason    // "" when released
	Err  error         // the lease's dlock.Lease.Err: nil when released
}

// LeaderEvent is a change of this process's leadership of a dlock.Election.
type LeaderEvent struct {
	Name    string
	Term    uint64 // the leadership's term (its lease's fencing token)
	Leading bool   // true: leads from now on; false: no longer leads
}

// Kind is a type of lock: the one an event is about, or the one
// dlock.Client.Describe found holding a name.
type Kind string

// The kinds of lock. Which of them Describe can tell apart: admin.LockInfo.
const (
	KindMutex     Kind = "mutex"     // dlock.Mutex
	KindReentrant Kind = "reentrant" // dlock.ReentrantMutex
	KindRead      Kind = "rw.read"   // dlock.RWMutex, a read lock
	KindWrite     Kind = "rw.write"  // dlock.RWMutex, the write lock
	KindFair      Kind = "fair"      // dlock.FairMutex
	KindSemaphore Kind = "semaphore" // dlock.Semaphore
	KindMulti     Kind = "multi"     // dlock.MultiLock
	KindElection  Kind = "election"  // dlock.Election
	KindRedlock   Kind = "redlock"   // dlock.RedlockMutex
)

// LossReason says how a lease was lost. It is an error in the chain of
// every lost lease's error, beside dlock.ErrLeaseLost: match one with
// errors.Is(err, dlock.LossTaken), or read it with errors.As(err, &reason).
type LossReason string

// The ways a lease is lost: package dlock's LossExpired, LossTaken,
// LossForced and LossUnreachable say when each is told.
const (
	LossExpired     LossReason = "expired"     // the hold was gone from Redis
	LossTaken       LossReason = "taken"       // another owner holds the lock
	LossForced      LossReason = "forced"      // dlock.Client.ForceUnlock removed the hold
	LossUnreachable LossReason = "unreachable" // no renewal was confirmed in time
	// LossUnknown is what an [Observer] is told where none of the above
	// is known. No lost lease's error matches it.
	LossUnknown LossReason = "unknown"
)

// Error is the reason in words.
func (r LossReason) Error() string { return "lease lost: " + string(r) }
