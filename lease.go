package dlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockio/dlock/internal/clock"
)

// Lease is one acquisition of a lock: the proof of holding it, the fencing
// token to show the resource it protects, and the way to learn that the hold
// has ended. It is safe to use from several goroutines. A lease ends when
// released ([Lease.Unlock]) or lost: Redis refused a renewal, or its deadline
// passed first. It counts itself lost no later than Redis could give the
// lock to someone else: its deadline is the last confirmed sending plus
// TTL × (1 − drift), by the monotonic and the wall clock, whichever ends
// first. [Lease.AtRisk] warns half way there; a loss's error says why.
type Lease struct {
	name  string
	token uint64
	hold  hold         // where the lock is held, and how: all the rest is the lifecycle's
	rules leaseRules   // its handle's (copied: a lease keeps no handle alive)
	clock *clock.Clock // what it reads the time from: nil, the machine's; its Client's or Redlock's (see internal/clock)

	unlockMu sync.Mutex // one Unlock at a time, so their outcomes are not crossed

	// extendMu keeps one extension (Extend or renewal) of this lease in
	// flight at a time, so that the deadline follows the replies in the
	// order they came. That is not the order Redis applies them in: a
	// renewal held on the network, or go-redis's resend of one after a read
	// timeout, can land after a later Extend whose reply came first. So a
	// renewal only ever moves the hold's expiry later (see the extend
	// scripts): a late one cannot cut a longer Extend short. Only Extend
	// itself may shorten (shortens); a late copy of that one is inDoubt's.
	// An Extend waits for it no longer than its context allows.
	extendMu ctxMutex

	mu       sync.Mutex
	state    leaseState    // see lease_state.go
	ttl      time.Duration // what each renewal asks for
	deadline time.Time     // moves only on a confirmed renewal; its monotonic and wall readings both count (see leftAt)
	riskAt   time.Time     // half way from the last confirmed sending to deadline (see AtRisk)
	timer    *time.Timer   // fires at riskAt, then at deadline, by the monotonic clock (see nextCheck); none for a MultiLock's whole
	err      error         // set once finished: nil when released, else wraps ErrLeaseLost
	signals  *leaseSignals // made on first use (see leaseSignals)

	// obs tells an Observer about a lease returned to a caller (see
	// Observer.watch); nil when none is set.
	obs atomic.Pointer[leaseObs]
}

// hold is what differs between leases: where the lock is held and how it is
// extended, read and given back. Each lease's hold is one of three: a
// clientHold, in one Redis through a Client (clienthold.go); a redlockHold,
// on a majority of a Redlock's nodes (redlock_lease.go); a partsHold, the
// leases of a MultiLock's groups on several cluster slots (multilease.go).
// The Lease runs the same lifecycle over each: deadline, timer, renewal
// schedule, loss, Done.
type hold interface {
	// extend asks once that the hold be kept ttl from now. An Extend,
	// sent at extending, may shorten it (see shortens): a hold that sends
	// it counts on no more than it leaves until it is answered (see
	// inDoubt). A renewal (extending zero) only lengthens it. loss, when
	// Redis refused, is what the lease is lost with, and err what the
	// caller is told; err alone: the outcome is unknown.
	extend(ctx context.Context, ttl time.Duration, extending time.Time) (loss, err error)
	// ttl is [Lease.TTL] of a lease held as far as it knows.
	ttl(ctx context.Context) (time.Duration, error)
	// release gives the hold back, with the call's tombstone as rule says;
	// loss is what the lease ends with: nil when released.
	release(ctx context.Context, rule voidRule) (loss, err error)
	// renewAt has the hold renewed at at, unless the lease ended or is
	// being released meanwhile; a zero at stops its renewals.
	renewAt(at time.Time)
	addTokens(tokens map[string]uint64)
}

// start runs the lease from a grant or extension sent at sent, for validity:
// the deadline timer, and the renewals of an auto-renewed lease, the first
// a third of the way through.
func (l *Lease) start(sent time.Time, validity time.Duration) {
	l.mu.Lock() // checkDeadline may run before AfterFunc returns
	l.timer = time.AfterFunc(l.nextCheck(l.clock.Now()), l.checkDeadline)
	l.mu.Unlock()
	l.renewAt(sent.Add(validity / 3))
}

// renewAt has an auto-renewed lease's hold renewed at at (a zero at stops
// its renewals); a lease with a fixed lease time is never renewed.
func (l *Lease) renewAt(at time.Time) {
	if l.rules.renew {
		l.hold.renewAt(at)
	}
}

// errGrantExpired: a grant that arrived with too little TTL left expired
// before an extension could confirm it, or the extension too came back
// with too little left. A waiting Lock attempts again.
var errGrantExpired = fmt.Errorf("%w: the grant expired before it could be confirmed (a slow link?)", ErrNotAcquired)

// confirmGrant extends an unconfirmed grant to its TTL and starts it; a
// lease confirmed already is left as it is.
//
// The extension confirms the grant only if it was applied before the
// grant could have run out in Redis: its answer read before the grant's
// deadline (by both clocks). Past it, the hold may have expired, another
// may have held the lock and let it go, and a late copy of the call's
// attempt, under the same owner, taken it again with a new token: the
// extension would find that hold its owner's, and the lease hand it over
// with the grant's token, lower than the one before it. Such a grant
// expired; the caller gives back whatever its owner holds. A hand-over is
// not judged so (see leaseHandedOver): its deadline says little of its hold,
// and a waiter that hears of it only after the hold lapsed and a late
// copy of its last attempt retook the lock would be told by the lock's
// counter alone, which the extension does not read (issue 17, open).
func (l *Lease) confirmGrant(ctx context.Context) error {
	l.mu.Lock()
	state := l.state
	l.mu.Unlock()
	if state > leaseHandedOver {
		return nil
	}
	handedOver := state == leaseHandedOver
	if !handedOver && l.grantLapsed() {
		return errGrantExpired
	}
	sent := l.clock.Now()
	loss, err := l.hold.extend(ctx, l.ttl, time.Time{})
	switch {
	case loss != nil:
		return errGrantExpired
	case err != nil:
		return err
	case !handedOver && l.grantLapsed():
		return errGrantExpired
	}
	l.mu.Lock()
	l.step(leaseHeld)
	l.setDeadline(sent, l.ttl)
	l.mu.Unlock()
	// The confirmation crossed the same link as the grant: it is held to
	// startLease's rule, or the lease would be handed over lost, or too
	// late for its first renewal.
	if now := l.clock.Now(); l.leftAt(now) < max(l.ttl/3, now.Sub(sent)) {
		return errGrantExpired
	}
	l.start(sent, l.ttl)
	return nil
}

// handOver marks a grant that came with a release's hand-over (see
// leaseHandedOver); a grant confirmed already stays as it is.
func (l *Lease) handOver() {
	l.mu.Lock()
	l.step(leaseHandedOver)
	l.mu.Unlock()
}

// grantLapsed reports whether an unconfirmed grant's deadline has passed.
func (l *Lease) grantLapsed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leftAt(l.clock.Now()) <= 0
}

// shortens is the extend scripts' ARGV[3] from Lease.Extend: the caller asked
// for this TTL, shorter or not. Renewals and confirmGrant send lengthens,
// and then a script only ever moves a hold's expiry later.
const shortens, lengthens = "1", "0"

// validUntil is how long a hold sent at sent, for ttl, can be counted on.
func validUntil(sent time.Time, ttl time.Duration, drift float64) time.Time {
	return sent.Add(ttl - time.Duration(float64(ttl)*drift))
}

// Name returns the name of the lock this lease holds; for a [MultiLock]'s,
// the names it holds, sorted, joined by commas.
func (l *Lease) Name() string { return l.name }

// Token returns the fencing token of this hold: larger than the token of
// every earlier hold of the same lock name. Pass it to the resource the lock
// protects, and have the resource refuse a token lower than the highest it
// has seen. Tokens go up even when the counter is lost (each is at least the
// server's clock in µs), stay below 2^53, and are not consecutive. A
// [MultiLock]'s lease holds one per name: Token is the first's, and
// [Lease.Tokens] has them all.
func (l *Lease) Token() uint64 { return l.token }

// Tokens returns the fencing token of each lock the lease holds, by name:
// one for most leases, one per name for a [MultiLock]'s. Show each resource
// the token of the lock that protects it.
func (l *Lease) Tokens() map[string]uint64 {
	tokens := make(map[string]uint64)
	l.hold.addTokens(tokens)
	return tokens
}

// Done returns a channel that is closed when the lease ends: released or lost.
// (It is made on first use: most leases are unlocked without anyone waiting
// on it, and ten thousand held leases are a megabyte lighter without.)
func (l *Lease) Done() <-chan struct{} {
	l.expireIfPast()
	l.mu.Lock()
	defer l.mu.Unlock()
	sig := l.signal()
	if sig.done == nil {
		sig.done = make(chan struct{})
		if l.finished() {
			close(sig.done)
		}
	}
	return sig.done
}

// Err returns nil while the lease is held and after it was released; an error
// matching [ErrLeaseLost] once it is lost, including the moment its deadline
// has passed even if Done has not been closed yet.
func (l *Lease) Err() error {
	l.expireIfPast()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.finished() {
		return l.err
	}
	if l.leftAt(l.clock.Now()) <= 0 { // ending meanwhile
		return errDeadlinePassed
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
// lease ends; [context.Cause] then reports an error matching [ErrLeaseLost]
// if it was lost. Work done under the lock with this context stops by itself
// when the lock goes.
//
// The lease of a [ReentrantMutex] or [RWMutex] also travels in the context:
// a Lock of the same lock with it, or with a context derived from it,
// re-enters the hold as its owner (see [RWMutex]) while the lease is held.
func (l *Lease) Context(parent context.Context) context.Context {
	l.expireIfPast()
	if key := l.rules.heldKey; key != nil {
		parent = context.WithValue(parent, key, l.hold) // see ownerFor
	}
	ctx, cancel := context.WithCancelCause(parent)
	if key := l.whenEnded(func(err error) { cancel(err) }); key != nil {
		// Forget the callback when parent ends first, so a long-lived lease
		// does not collect them.
		context.AfterFunc(ctx, func() {
			l.mu.Lock()
			delete(l.signals.onEnd, key)
			l.mu.Unlock()
		})
	}
	return ctx
}

// whenEnded calls f with the lease's end (context.Canceled for a release)
// once it ends, and returns its key in onEnd; if it has ended, at once, and
// returns nil.
func (l *Lease) whenEnded(f func(error)) *func(error) {
	l.mu.Lock()
	if l.finished() {
		err := l.err
		l.mu.Unlock()
		f(cancelCause(err))
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

// Extend sets the lock's remaining time to ttl, if this lease still holds it,
// and makes ttl the TTL of later automatic renewals, the next due a third of
// ttl after this extension. Only Extend sets a shorter remaining time than
// the lock has: an automatic renewal never shortens it, so one delayed on
// the network cannot cut an Extend to a longer ttl short. A shorter ttl is
// counted on from the moment the Extend is sent, before its reply is in:
// Redis may apply it, and let the key expire, while the reply is on its
// way. It never re-creates a lock that has gone: then it returns
// [ErrNotHeld] and the lease is lost. An extension confirmed only after the lease's deadline does
// not bring the lease back: it returns an error matching [ErrLeaseLost], and
// the lease stays lost.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	err := validTTL("TTL", ttl)
	if err == nil {
		err = l.extend(ctx, ttl)
	}
	l.extended(ttl, err)
	return err
}

// extend is Extend of a valid ttl. A MultiLock's whole extends each part
// the same way, and then counts on the time it sent its own Extend.
func (l *Lease) extend(ctx context.Context, ttl time.Duration) error {
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
		l.refusedWith(loss)
		return err
	case err != nil:
		return err // counted on no more than it may have left (see inDoubt)
	}
	return l.confirmed(sent, ttl)
}

// TTL returns how long Redis will keep this hold if it is not renewed.
// A hold that is no longer ours gives [ErrNotHeld] and the lease is lost.
// For a [Redlock]'s lease, held on several nodes, it is the validity left:
// the time until [Lease.Deadline], asking no node.
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	if err := l.heldLocally(); err != nil {
		return 0, err
	}
	return l.hold.ttl(ctx)
}

// Unlock releases the hold and wakes a waiter. It releases even when ctx is
// cancelled, so that a cancelled caller leaves no lock behind; whatever ctx,
// it is bounded by [CleanupTimeout] (with ContextTimeoutEnabled). It returns
// nil when the hold was released, also for a lost lease still held in Redis,
// and [ErrNotHeld] when nothing of the caller's was left to release: released
// before, or lost and maybe taken by another. A [Redlock]'s lease waits for
// each node up to the node timeout and resends a failed release in the
// background. The cases are in docs/SAFETY.md ("Contracts in detail").
func (l *Lease) Unlock(ctx context.Context) error {
	if ob := l.obs.Load(); ob != nil && !ob.part {
		return ob.unlock(ctx, l)
	}
	return l.unlock(ctx, voidIfCopied)
}

// giveUp is Unlock for a lease its call will not return (its caller's
// context ended as it was granted, a grant that could not be confirmed, a
// MultiLock rolling back): the release also writes the call's tombstone, as
// an abandon does, so that a copy of the attempt that was granted, still
// on its way, takes nothing when it arrives.
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
		l.mu.Lock()
		l.step(leaseReleased)
		l.mu.Unlock()
	}
	return err
}

func (l *Lease) ended() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.finished()
}

// heldLocally says whether the lease may still hold the lock as far as this
// process knows; an ended lease is not extended or inspected.
func (l *Lease) heldLocally() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.finished() || l.leftAt(l.clock.Now()) <= 0 {
		return fmt.Errorf("%w: the lease of %q has ended", ErrNotHeld, l.name)
	}
	return nil
}

// end closes the lease once, with err nil for a release, and reports
// whether this call did. A loss is logged before Done closes, so the log
// shows it before anyone reacts to it.
func (l *Lease) end(err error) bool { return l.endTelling(err, renewalReport{}) }

// endTelling is end for a loss, with first (the Renewal report that found
// it, from the lease's observer) told before the End; false when the lease
// was ending already, and first is the caller's to tell.
func (l *Lease) endTelling(err error, first renewalReport) bool {
	l.mu.Lock()
	if !l.step(leaseEnding) { // ending already
		l.mu.Unlock()
		return false
	}
	ob := l.obs.Load() // under mu: see Observer.watch
	l.mu.Unlock()
	if err != nil {
		l.rules.log.Warn("dlock: lease lost", "lock", l.name, "token", l.token, "err", err)
	}
	if ob != nil && err == nil { // a release: told before Done closes, on the caller's goroutine
		ob.ended(nil)
	}

	l.mu.Lock()
	l.err = err
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
		(*cb)(cancelCause(err))
	}
	if ob != nil && err != nil {
		// A loss is found by the renewal loop or a timer: told once Done
		// has closed, on a goroutine of its own, so that no observer delays
		// the holder's signal or the renewals of other leases.
		go func() {
			first.tell()
			ob.ended(err)
		}()
	}
	return true
}

func cancelCause(err error) error {
	if err == nil {
		return context.Canceled
	}
	return err
}
