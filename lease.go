package dlock

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockio/dlock/internal/clock"
)

// Lease is one acquisition of a lock: its proof, its fencing token and its
// end. It is safe for concurrent use. It ends when released ([Lease.Unlock])
// or lost. It counts itself lost no later than Redis could give the lock to
// someone else: the last confirmed sending plus TTL × (1 − drift), by the
// monotonic or wall clock, whichever ends first. [Lease.AtRisk] warns half way
// there.
type Lease struct {
	name  string
	token uint64
	hold  hold         // where the lock is held, and how: all the rest is the lifecycle's
	rules leaseRules   // its handle's (copied: a lease keeps no handle alive)
	clock *clock.Clock // its Client's or Redlock's; nil: the machine's

	unlockMu sync.Mutex // one Unlock at a time, so their outcomes are not crossed

	// extendMu keeps one extension in flight, so the deadline follows the
	// replies in order; Redis may apply them out of order (see shortens).
	extendMu ctxMutex

	mu       sync.Mutex
	state    leaseState    // see lease_state.go
	ttl      time.Duration // what each renewal asks for
	deadline time.Time     // moves only on a confirmed renewal; its monotonic and wall readings both count (see leftAt)
	riskAt   time.Time     // half way from the last confirmed sending to deadline (see AtRisk)
	timer    *time.Timer   // fires at riskAt, then at deadline, by the monotonic clock (see nextCheck); none for a MultiLock's whole
	err      error         // set as the end begins: nil for a release, else wraps ErrLeaseLost
	signals  *leaseSignals // made on first use (see leaseSignals)

	obs atomic.Pointer[leaseObs] // nil without an Observer (see hooks.watch)
}

// hold is where a lease's lock is held: a clientHold, a redlockHold or a
// MultiLock's partsHold. The Lease runs one lifecycle over each.
type hold interface {
	// extend asks once to keep the hold ttl from now: an Extend (sent at
	// extending) may shorten it, a renewal (zero extending) only lengthens.
	// loss ends the lease; err alone: the outcome is unknown.
	extend(ctx context.Context, ttl time.Duration, extending time.Time) (loss, err error)
	ttl(ctx context.Context) (time.Duration, error) // Lease.TTL, once heldLocally
	// release gives the hold back, with the call's tombstone as rule says;
	// loss is what the lease ends with: nil when released.
	release(ctx context.Context, rule voidRule) (loss, err error)
	// renewAt has the hold renewed at at, unless the lease is ending or
	// being released by then; a zero at stops its renewals.
	renewAt(at time.Time)
	addTokens(tokens map[string]uint64)
}

// start runs the deadline timer, and renewals from sent + validity/3.
func (l *Lease) start(sent time.Time, validity time.Duration) {
	l.mu.Lock() // checkDeadline may run before AfterFunc returns
	l.timer = time.AfterFunc(l.nextCheck(l.clock.Now()), l.checkDeadline)
	l.mu.Unlock()
	l.renewAt(sent.Add(validity / 3))
}

// renewAt is hold.renewAt for an auto-renewed lease; a fixed one never renews.
func (l *Lease) renewAt(at time.Time) {
	if l.rules.renew {
		l.hold.renewAt(at)
	}
}

// errGrantExpired: a late grant was not confirmed in time; Lock tries again.
var errGrantExpired = fmt.Errorf("%w: the grant expired before it could be confirmed (a slow link?)", ErrNotAcquired)

// confirmGrant extends an unconfirmed grant to its TTL and starts it. The
// extension counts only if answered before the grant's deadline: later, a
// late copy of the attempt may have retaken the lock with a newer token
// (docs/SAFETY.md). A hand-over is not judged so (issue 17, open).
func (l *Lease) confirmGrant(ctx context.Context) error {
	l.mu.Lock()
	state := l.state
	l.mu.Unlock()
	if state > leaseHandedOver {
		return nil
	}
	handedOver := state == leaseHandedOver
	if !handedOver && l.heldLocally() != nil { // unshared: only its deadline can end it
		return errGrantExpired
	}
	sent := l.clock.Now()
	loss, err := l.hold.extend(ctx, l.ttl, time.Time{})
	switch {
	case loss != nil:
		return errGrantExpired
	case err != nil:
		return err
	case !handedOver && l.heldLocally() != nil:
		return errGrantExpired
	}
	l.mu.Lock()
	l.step(leaseHeld)
	l.setDeadline(sent, l.ttl)
	l.mu.Unlock()
	// The confirmation crossed the grant's link: held to startLease's rule.
	if now := l.clock.Now(); l.leftAt(now) < max(l.ttl/3, now.Sub(sent)) {
		return errGrantExpired
	}
	l.start(sent, l.ttl)
	return nil
}

// shortens is the extend scripts' Shorten from Lease.Extend; renewals send
// lengthens, so a late one cannot cut an Extend short.
const shortens, lengthens = "1", "0"

// validUntil is how long a hold sent at sent, for ttl, can be counted on.
func validUntil(sent time.Time, ttl time.Duration, drift float64) time.Time {
	return sent.Add(ttl - time.Duration(float64(ttl)*drift))
}

// Name returns the name of the lock this lease holds; for a [MultiLock]'s,
// the names it holds, sorted, joined by commas.
func (l *Lease) Name() string { return l.name }

// Token returns the fencing token of this hold, larger than that of every
// earlier hold of the name: have the resource refuse a token lower than the
// highest it has seen. Tokens rise even when the counter is lost (each is at
// least the server's clock in µs), stay below 2^53 and are not consecutive.
// A [MultiLock]'s Token is its first name's; see [Lease.Tokens].
func (l *Lease) Token() uint64 { return l.token }

// Tokens returns the fencing token of each lock the lease holds, by name.
func (l *Lease) Tokens() map[string]uint64 {
	tokens := make(map[string]uint64)
	l.hold.addTokens(tokens)
	return tokens
}

// Done returns a channel that is closed when the lease ends: released or lost.
func (l *Lease) Done() <-chan struct{} {
	l.expireIfPast()
	l.mu.Lock()
	defer l.mu.Unlock()
	return made(&l.signal().done, l.finished())
}

// Err is nil while the lease is held and once released, and matches
// [ErrLeaseLost] once lost or past its deadline, even before Done closes.
func (l *Lease) Err() error {
	l.expireIfPast()
	l.mu.Lock()
	defer l.mu.Unlock()
	if leaseEnding <= l.state {
		return l.err
	}
	if l.leftAt(l.clock.Now()) <= 0 { // ending meanwhile, on its timer
		return l.deadlineLoss()
	}
	return nil
}

func (l *Lease) currentTTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// Deadline returns the moment this lease counts itself lost unless a renewal
// is confirmed before it. It carries a monotonic clock reading; when the
// wall clock ends the lease sooner (the machine was suspended), it is that
// moment, read now. A [MultiLock]'s is the earliest of its locks'.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	if left := l.leftAt(now); left < l.deadline.Sub(now) {
		return now.Add(left)
	}
	return l.deadline
}

// Context returns a context derived from parent that is cancelled when the
// lease ends; [context.Cause] then matches [ErrLeaseLost] if it was lost.
// A [ReentrantMutex] or [RWMutex] lease also travels in it: a Lock of the
// same lock with this context re-enters the hold while the lease is held.
func (l *Lease) Context(parent context.Context) context.Context {
	l.expireIfPast()
	if key := l.rules.heldKey; key != nil {
		parent = context.WithValue(parent, key, l.hold) // see ownerFor
	}
	ctx, cancel := context.WithCancelCause(parent)
	if key := l.whenEnded(cancel); key != nil {
		context.AfterFunc(ctx, func() { // parent ended first: a long lease collects no callbacks
			l.mu.Lock()
			delete(l.signals.onEnd, key)
			l.mu.Unlock()
		})
	}
	return ctx
}

// whenEnded calls f with the lease's end (context.Canceled for a release)
// once it ends, and returns its key in onEnd; if ended, at once, with nil.
func (l *Lease) whenEnded(f func(error)) *func(error) {
	l.mu.Lock()
	if l.finished() {
		err := l.err
		l.mu.Unlock()
		f(cmp.Or(err, context.Canceled))
		return nil
	}
	sig := l.signal()
	if sig.onEnd == nil {
		sig.onEnd = make(map[*func(error)]struct{})
	}
	sig.onEnd[&f] = struct{}{}
	l.mu.Unlock()
	return &f
}

// String names the lease for logs; it leaves out the owner token.
func (l *Lease) String() string {
	return fmt.Sprintf("dlock.Lease{name: %q, token: %d}", l.name, l.token)
}

// GoString is String, so that %#v does not print the owner token either.
func (l *Lease) GoString() string { return l.String() }

// Extend sets the lock's remaining time to ttl, if this lease still holds
// it, and makes ttl the TTL of later renewals, the next due ttl/3 from now.
// Only Extend shortens; renewals never do. A shorter ttl counts from the
// moment it is sent. A lock that has gone is not re-created: Extend returns
// [ErrNotHeld] and the lease is lost. A reply after the lease's deadline
// returns an error matching [ErrLeaseLost]; the lease stays lost.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) (err error) {
	defer func() { l.extended(ttl, err) }() // after extendMu: a slow hook delays no renewal
	if err := validTTL("TTL", ttl); err != nil {
		return err
	}
	if err := l.heldLocally(); err != nil {
		return err
	}
	if err := l.extendMu.Lock(ctx); err != nil { // nothing was sent
		return fmt.Errorf("dlock: extend %q: %w", l.name, err)
	}
	defer l.extendMu.Unlock()
	sent := l.clock.Now()
	loss, err := l.hold.extend(ctx, ttl, sent)
	switch {
	case loss != nil:
		l.refusedWith(loss, renewalReport{})
		return err
	case err != nil:
		return err // counted on for no more than it may have left (inDoubt)
	}
	return l.confirmed(sent, ttl)
}

// TTL returns how long Redis will keep this hold if it is not renewed. A
// hold no longer ours gives [ErrNotHeld] and the lease is lost. A [Redlock]'s,
// held on several nodes, is the time until [Lease.Deadline], asking no node.
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	if err := l.heldLocally(); err != nil {
		return 0, err
	}
	return l.hold.ttl(ctx)
}

// Unlock releases the hold and wakes a waiter. It releases even when ctx is
// cancelled, bounded by [CleanupTimeout] (with ContextTimeoutEnabled). It
// returns nil when the hold was released, also for a lost lease still held
// in Redis, and [ErrNotHeld] when nothing of the caller's was left. The
// cases, Redlock's included, are in docs/SAFETY.md ("Contracts in detail").
func (l *Lease) Unlock(ctx context.Context) error {
	if ob := l.obs.Load(); ob != nil && !ob.part {
		return ob.unlock(ctx, l)
	}
	return l.unlock(ctx, voidIfCopied)
}

// giveUp is Unlock for a lease its call will not return: the release writes
// the call's tombstone too, so a late copy of the attempt takes nothing.
func (l *Lease) giveUp(ctx context.Context) error { return l.unlock(ctx, voidAlways) }

// voidRule says whether a release writes its call's tombstone.
type voidRule int

const (
	voidIfCopied voidRule = iota // when an attempt of the call may have been sent twice (an Unlock)
	voidAlways                   // the call gives up (see giveUp)
)

func (l *Lease) unlock(ctx context.Context, rule voidRule) error {
	l.unlockMu.Lock()
	defer l.unlockMu.Unlock()
	l.mu.Lock()
	released := l.state == leaseReleased // see leaseReleased
	l.step(leaseReleasing)               // unless it is ending, or ended
	l.mu.Unlock()
	if released {
		return fmt.Errorf("%w: %q was already released", ErrNotHeld, l.name)
	}
	l.renewAt(time.Time{})
	loss, err := l.hold.release(ctx, rule)
	if !l.end(loss) && err == nil {
		<-l.Done() // ending lost meanwhile: released once it has ended
	}
	if err == nil {
		l.stepLocked(leaseReleased)
	}
	return err
}

// heldLocally is nil while the lease may hold the lock as far as this
// process knows: an ended lease is not extended or inspected.
func (l *Lease) heldLocally() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.finished() || l.leftAt(l.clock.Now()) <= 0 {
		return fmt.Errorf("%w: the lease of %q has ended", ErrNotHeld, l.name)
	}
	return nil
}

// end ends the lease once, with err nil for a release, and reports whether
// this call did. A loss is logged before Done closes.
func (l *Lease) end(err error) bool { return l.endTelling(err, renewalReport{}) }

// endTelling is end with first, the Renewal report that found the loss,
// told before the End; on false, first is the caller's to tell.
func (l *Lease) endTelling(err error, first renewalReport) bool {
	l.mu.Lock()
	if !l.step(leaseEnding) { // ending already
		l.mu.Unlock()
		return false
	}
	l.err = err        // what Err tells from now on
	ob := l.obs.Load() // under mu: see hooks.watch
	l.mu.Unlock()
	if err != nil {
		l.rules.log.Warn("dlock: lease lost", "lock", l.name, "token", l.token, "err", err)
	} else if ob != nil { // a release: told before Done closes, on the caller's goroutine
		ob.ended(nil)
	}

	l.mu.Lock()
	l.step(leaseEnded)
	if err != nil {
		l.setRisky() // before Done: AtRisk tells of every loss
	}
	var callbacks map[*func(error)]struct{}
	if sig := l.signals; sig != nil {
		if sig.done != nil {
			close(sig.done)
		}
		callbacks, sig.onEnd = sig.onEnd, nil
	}
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()

	l.renewAt(time.Time{})
	for cb := range callbacks {
		(*cb)(cmp.Or(err, context.Canceled))
	}
	if ob != nil && err != nil {
		go func() { // on a goroutine of its own: no observer delays Done or renewals
			first.tell()
			ob.ended(err)
		}()
	}
	return true
}
