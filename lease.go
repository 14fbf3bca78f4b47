package dlock

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lease is one acquisition of a lock: the proof of holding it, the fencing
// token to show the resource it protects, and the way to learn that the hold
// has ended. A Lease is safe to use from several goroutines.
//
// A lease ends when it is released ([Lease.Unlock]) or lost: Redis refused a
// renewal (the key expired, was deleted, or belongs to someone else), or the
// lease's deadline passed before a renewal was confirmed. It counts itself
// lost no later than Redis could give the lock to someone else: the deadline
// is the moment the acquire (or the last confirmed renewal) was sent plus
// TTL × (1 − drift), on this process's monotonic clock and on its wall
// clock, whichever ends first: the monotonic clock stands still while the
// machine is suspended, Redis's clock does not. [Lease.AtRisk] warns half
// way there when renewals are not getting through, and a lost lease's error
// says why it was lost ([LossReason]).
type Lease struct {
	c       *Client
	name    string
	kind    *leaseKind
	keys    []string // KEYS of the kind's extend and TTL scripts
	relHead []any    // its release's EVALSHA command up to the owner token
	owner   string   // secret: never logged, never in an error
	token   uint64
	drift   float64
	log     *slog.Logger

	// tombstone is that of the call the lease was granted to (see
	// keys.tombstone), written by a release that gives the call up.
	tombstone string

	unlockMu  sync.Mutex  // one Unlock at a time, so their outcomes are not crossed
	unlocked  bool        // under unlockMu: a release of ours succeeded, so another Unlock is refused
	unlocking atomic.Bool // set before a release is sent: renewals stop counting
	renew     bool        // renewed by the Client's renewer
	watched   bool        // renewed, by it or by a Redlock's own loop: AtRisk watches its renewals

	// unconfirmed: the grant arrived late (see startLease), so it has no
	// deadline timer nor renewals until confirmGrant extends it.
	// Set by startLease, cleared by confirmGrant, before any other use.
	unconfirmed bool

	// maybeCopied: an attempt of the call took long enough for the Redis
	// client to have sent it twice (see Client.resendAfter), so a copy may
	// still be on its way: the release writes the call's tombstone. Set
	// before the lease is handed to the caller.
	maybeCopied bool

	// Under mu, with the fields below it; here, they pack with the flags
	// above (ten thousand held leases are worth a few bytes each).
	finished bool // the lease has ended
	ending   bool // end has begun: only its first call counts

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
	ttl      time.Duration // what each renewal asks for
	deadline time.Time     // moves only on a confirmed renewal; its monotonic and wall readings both count (see leftAt)
	riskAt   time.Time     // half way from the last confirmed sending to deadline (see AtRisk)
	timer    *time.Timer   // fires at riskAt, then at deadline, by the monotonic clock (see nextCheck)
	done     chan struct{} // made by the first Done, closed once finished
	risk     chan struct{} // made by the first AtRisk, closed once risky
	risky    bool          // at risk (see AtRisk), or lost
	err      error         // set once finished: nil when released, else wraps ErrLeaseLost
	onEnd    map[*func(error)]struct{}

	// Owned by the Client's renewer, under its lock.
	nextRenew time.Time
	heapIndex int

	// A MultiLock's lease holds several locks: a group of them in one
	// slot, taken by one script with one owner token (group), or the
	// groups' leases (parts), one per slot, when they span several.
	group *groupTokens
	parts []*Lease
	whole *Lease // of a part: the MultiLock's lease, at risk when a part is

	// A Redlock's lease is held on a majority of nodes, not through c.
	redlock *redlockHold
	slack   time.Duration // given up besides TTL × drift (a Redlock's 2 ms)

	// obs tells an Observer about a lease returned to a caller (see
	// Observer.watch); nil when none is set.
	obs atomic.Pointer[leaseObs]
}

// groupTokens are the locks of a MultiLock group held by one lease, and the
// fencing token of each.
type groupTokens struct {
	names  []string
	tokens []uint64
}

// leaseKind is what differs between lock types: the scripts that renew,
// release, inspect and give up one hold. Every kind's scripts take the owner
// token as ARGV[1]; extend takes the TTL in ms as ARGV[2], then shortens from
// Lease.Extend only (a renewal never shortens a hold), and returns 1 or 0;
// release and abandon take the publish command as ARGV[2] (abandon then the
// tombstone's lifetime in ms and the waiter id; release then its mark's
// lifetime in ms, the mark being its last KEY, see releaseMark, and from a
// giving-up release the tombstone's lifetime, the tombstone after the mark)
// and return 1 or 0; ttl returns milliseconds left, or -3 when not held.
type leaseKind struct {
	extend  *redis.Script
	release *redis.Script
	ttl     *redis.Script
	abandon *redis.Script
}

// leaseSpec is what a lock type knows about a hold it has just been granted.
type leaseSpec struct {
	name    string
	kind    *leaseKind
	keys    []string // KEYS of extend and TTL
	relKeys []string // KEYS of release
	relHead []any    // or release's EVALSHA command up to its last key, the mark, boxed by the type (see Mutex.argv)
	mark    string   // the lock key the release mark is named after (see releaseMark)
	owner   string
	token   uint64
	sent    time.Time // when the acquire that granted it was sent
	cfg     settings

	// tombstone is the call's (see keys.tombstone): a release that gives
	// the call up writes it.
	tombstone string

	// validity is how long the hold was granted for, when a release handed
	// it over for less than the TTL (see hand_next.lua); 0 means the TTL.
	validity time.Duration

	names  []string // a MultiLock group's locks, and their tokens
	tokens []uint64
}

// startLease makes the lease of a granted hold and, unless it has a fixed
// lease time, hands it to the renewer.
func (c *Client) startLease(spec leaseSpec) *Lease {
	ttl, autoRenew := spec.cfg.holdTTL()
	validity := ttl
	if spec.validity > 0 && spec.validity < ttl {
		validity = spec.validity
	}
	l := &Lease{
		c: c, name: spec.name, kind: spec.kind, keys: spec.keys, relHead: spec.relHead, tombstone: spec.tombstone,
		owner: spec.owner, token: spec.token, drift: spec.cfg.drift, renew: autoRenew, watched: autoRenew,
		log: spec.cfg.logger, ttl: ttl,
		heapIndex: -1,
	}
	l.setDeadline(spec.sent, validity)
	mark := releaseMark(spec.mark, spec.owner)
	if l.relHead == nil {
		l.relHead = evalshaArgv(spec.kind.release, append(spec.relKeys[:len(spec.relKeys):len(spec.relKeys)], mark), nil)
	} else {
		l.relHead = append(l.relHead[:len(l.relHead):len(l.relHead)], mark)
	}
	if spec.names != nil {
		l.group = &groupTokens{names: spec.names, tokens: spec.tokens}
	}
	left := time.Until(l.deadline)
	if left < validity/3 || left < time.Since(spec.sent) || (validity < ttl && !autoRenew) {
		// A cold connection's dial and script load on a slow link all count
		// against the grant: keep confirms it before the caller sees it, so
		// that no lease is handed over already lost, overdue for renewal, or
		// with less time left than its grant took to arrive (a renewal
		// crosses the same link, and would likely not make it). A fixed
		// lease handed over for less than its lease time is extended to it.
		l.unconfirmed = true
		return l
	}
	l.start(spec.sent, validity)
	return l
}

// start runs the lease from a grant or extension sent at sent, for validity:
// the deadline timer, and the renewals of an auto-renewed lease, the first
// a third of the way through.
func (l *Lease) start(sent time.Time, validity time.Duration) {
	l.mu.Lock() // checkDeadline may run before AfterFunc returns
	l.timer = time.AfterFunc(l.nextCheck(time.Now()), l.checkDeadline)
	l.mu.Unlock()
	if l.renew {
		l.c.renewer.add(l, sent.Add(validity/3))
	}
}

// errGrantExpired: a grant that arrived with too little TTL left expired
// before an extension could confirm it. A waiting Lock attempts again.
var errGrantExpired = fmt.Errorf("%w: the grant expired before it could be confirmed (a slow link?)", ErrNotAcquired)

// confirmGrant extends an unconfirmed grant (and each unconfirmed part of a
// MultiLock's) to its TTL and starts it; a lease confirmed already is left
// as it is.
func (l *Lease) confirmGrant(ctx context.Context) error {
	for _, p := range l.parts {
		if err := p.confirmGrant(ctx); err != nil {
			return err
		}
	}
	if !l.unconfirmed {
		return nil
	}
	sent := time.Now()
	n, err := runScript(ctx, l.c.rdb, l.kind.extend, l.keys, l.owner, l.ttl.Milliseconds()).Int64()
	switch {
	case err != nil:
		return redisError("confirm", l.name, err)
	case n != 1:
		return errGrantExpired
	}
	l.unconfirmed = false
	l.setDeadline(sent, l.ttl)
	l.start(sent, l.ttl)
	return nil
}

// shortens is the extend scripts' ARGV[3] from Lease.Extend: the caller asked
// for this TTL, shorter or not. Renewals and confirmGrant leave it out, and
// then a script only ever moves a hold's expiry later.
const shortens = "1"

// validUntil is how long a hold sent at sent, for ttl, can be counted on.
func validUntil(sent time.Time, ttl time.Duration, drift float64) time.Time {
	return sent.Add(ttl - time.Duration(float64(ttl)*drift))
}

// Name returns the name of the lock this lease holds; for a [MultiLock]'s,
// the names it holds, sorted, joined by commas.
func (l *Lease) Name() string { return l.name }

// Token returns the fencing token of this hold: larger than the token of every
// earlier hold of the same lock name. Pass it to the resource the lock
// protects and have the resource refuse any token lower than the highest it
// has seen. A [MultiLock]'s lease holds a token per name: Token is the
// first's, [Lease.Tokens] has them all.
//
// A token is one above the name's last, and never below the Redis server's
// clock in microseconds since 1970, so tokens keep going up when the
// counter is lost (evicted, flushed, deleted, or missed by a replica
// promoted in a failover): unless the server's clock stepped back further
// than it has moved forward since the last hold. The counter expires
// [FenceRetentionTTLs] hold TTLs after the last token. Tokens stay
// below 2^53, exact as JSON numbers and float64s. They are not consecutive:
// compare them, do not count on the next being one more.
func (l *Lease) Token() uint64 { return l.token }

// Tokens returns the fencing token of each lock the lease holds, by name:
// one for most leases, one per name for a [MultiLock]'s. Show each resource
// the token of the lock that protects it.
func (l *Lease) Tokens() map[string]uint64 {
	tokens := make(map[string]uint64)
	l.addTokens(tokens)
	return tokens
}

func (l *Lease) addTokens(tokens map[string]uint64) {
	switch {
	case l.parts != nil:
		for _, p := range l.parts {
			p.addTokens(tokens)
		}
	case l.group != nil:
		for i, name := range l.group.names {
			tokens[name] = l.group.tokens[i]
		}
	default:
		tokens[l.name] = l.token
	}
}

// Done returns a channel that is closed when the lease ends: released or lost.
// (It is made on first use: most leases are unlocked without anyone waiting
// on it, and ten thousand held leases are a megabyte lighter without.)
func (l *Lease) Done() <-chan struct{} {
	l.expireIfPast()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
		if l.finished {
			close(l.done)
		}
	}
	return l.done
}

// Err returns nil while the lease is held and after it was released; an error
// matching [ErrLeaseLost] once it is lost, including the moment its deadline
// has passed even if Done has not been closed yet.
func (l *Lease) Err() error {
	l.expireIfPast()
	if l.parts != nil {
		return l.partsErr()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isDone() {
		return l.err
	}
	if l.leftAt(time.Now()) <= 0 { // ending meanwhile
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
// moment, read now.
func (l *Lease) Deadline() time.Time {
	if l.parts != nil {
		return l.partsDeadline()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
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
	if l.kind == rwKind {
		parent = withHold(parent, l)
	}
	ctx, cancel := context.WithCancelCause(parent)
	stopOnEnd := func(err error) { cancel(err) }
	l.mu.Lock()
	if l.isDone() {
		err := l.err
		l.mu.Unlock()
		cancel(err)
		return ctx
	}
	if l.onEnd == nil {
		l.onEnd = make(map[*func(error)]struct{})
	}
	l.onEnd[&stopOnEnd] = struct{}{}
	l.mu.Unlock()
	// Forget the callback when parent ends first, so a long-lived lease does
	// not collect them.
	context.AfterFunc(ctx, func() {
		l.mu.Lock()
		delete(l.onEnd, &stopOnEnd)
		l.mu.Unlock()
	})
	return ctx
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
// the network cannot cut an Extend to a longer ttl short. It never
// re-creates a lock that has gone: then it returns [ErrNotHeld] and the
// lease is lost. An extension confirmed only after the lease's deadline does
// not bring the lease back: it returns an error matching [ErrLeaseLost], and
// the lease stays lost.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	err := l.extend(ctx, ttl)
	l.extended(ttl, err)
	return err
}

func (l *Lease) extend(ctx context.Context, ttl time.Duration) error {
	if err := validTTL("TTL", ttl); err != nil {
		return err
	}
	if l.parts != nil {
		return l.extendParts(ctx, ttl)
	}
	if l.redlock != nil {
		return l.redlock.extend(ctx, l, ttl)
	}
	if err := l.heldLocally(); err != nil {
		return err
	}
	if err := l.extendMu.Lock(ctx); err != nil { // nothing was sent
		return fmt.Errorf("dlock: extend %q: %w", l.name, err)
	}
	defer l.extendMu.Unlock()
	sent := time.Now()
	n, err := runScript(ctx, l.c.rdb, l.kind.extend, l.keys, l.owner, ttl.Milliseconds(), shortens).Int64()
	if err != nil {
		l.inDoubt(sent, ttl)
		return redisError("extend", l.name, err)
	}
	if n != 1 {
		l.refusedWith(refusal(n))
		return fmt.Errorf("%w: extend of %q refused: the lock expired or was taken", ErrNotHeld, l.name)
	}
	if err := l.confirmed(sent, ttl); err != nil {
		return err
	}
	l.mu.Lock()
	l.ttl = ttl
	l.mu.Unlock()
	if l.renew {
		// The renewal due was planned for the former TTL: a third of a
		// longer one is too late for a shorter TTL.
		l.c.renewer.reschedule(l, sent.Add(ttl/3))
	}
	return nil
}

// TTL returns how long Redis will keep this hold if it is not renewed.
// A hold that is no longer ours gives [ErrNotHeld] and the lease is lost.
// For a [Redlock]'s lease, held on several nodes, it is the validity left:
// the time until [Lease.Deadline], asking no node.
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	if l.parts != nil {
		return l.partsTTL(ctx)
	}
	if l.redlock != nil {
		return l.redlock.validity()
	}
	if err := l.heldLocally(); err != nil {
		return 0, err
	}
	ms, err := runScript(ctx, l.c.rdb, l.kind.ttl, l.keys, l.owner).Int64()
	if err != nil {
		return 0, redisError("ttl", l.name, err)
	}
	if ms == -3 {
		l.refused()
		return 0, fmt.Errorf("%w: %q expired or was taken", ErrNotHeld, l.name)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Unlock releases the hold and wakes a waiter. It releases even when ctx is
// already cancelled or past its deadline: a cancelled caller must not leave
// its lock behind. Whatever ctx (one that never ends included), the release
// is bounded by [CleanupTimeout] (with a go-redis client that lets contexts
// bound its round trips: ContextTimeoutEnabled).
//
// It returns [ErrNotHeld] when there was nothing of ours left to release: the
// lease was released before, or was lost and someone else may hold the lock.
// A lease that was lost but still held in Redis (a renewal that could not get
// through in time) is released all the same, and Unlock returns nil. So does
// an Unlock whose release was applied but whose reply was lost: the copy the
// Redis client sends again finds the release's mark.
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
	voidNever                    // the call goes on, and tries again
)

func (l *Lease) unlock(ctx context.Context, rule voidRule) error {
	l.unlockMu.Lock()
	defer l.unlockMu.Unlock()
	// A lease that ended lost may still have been released by an Unlock
	// (see Unlock): the release's mark would make a second release look
	// like a resent first one, so the lease remembers.
	if l.unlocked || l.released() {
		return fmt.Errorf("%w: %q was already released", ErrNotHeld, l.name)
	}
	err := l.release(ctx, rule)
	l.unlocked = err == nil
	return err
}

// release is unlock's work, under unlockMu.
func (l *Lease) release(ctx context.Context, rule voidRule) error {
	l.unlocking.Store(true)
	if l.parts != nil {
		return l.unlockParts(ctx)
	}
	if l.redlock != nil {
		return l.redlock.unlock(ctx, l)
	}
	l.c.renewer.remove(l)

	// Bounded whatever ctx, so that the release's mark outlives every copy
	// of it whose reply this Unlock could read (see releaseMarkLife).
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, releaseMarkLife)
	defer cancel()
	head, extra := l.relHead, []any{releaseMarkMillis}
	void := rule == voidAlways || (rule == voidIfCopied && l.maybeCopied)
	if void && l.tombstone != "" { // the tombstone is release's last KEY, its lifetime its last ARGV
		head = append(slices.Clone(l.relHead), l.tombstone)
		head[2] = head[2].(int) + 1 // the number of KEYS (see evalshaArgv, Mutex.argv)
		extra = append(extra, tombstoneLifeMillis)
	}
	ok, err := l.c.releaseWithin(ctx, l.kind.release, head, l.owner, extra...)
	if err != nil {
		// Whether Redis let go is unknown; it does within the TTL at the latest.
		l.end(errUnlockIncomplete)
		return redisError("unlock", l.name, err)
	}
	if !ok {
		l.end(errRenewalRefused)
		return fmt.Errorf("%w: %q expired or was taken before unlock", ErrNotHeld, l.name)
	}
	l.end(nil)
	return nil
}

// wallClockSkew is added to the wall clock the leases read (tests stand in
// a suspension with it); 0 otherwise.
var wallClockSkew atomic.Int64

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
	if autoRenewed(l) && !l.renewerClosed() {
		return errDeadlinePassed
	}
	return errRanOut
}

// autoRenewed reports whether l renews itself: a Redlock's lease renews
// on its own, and a MultiLock's through its parts.
func autoRenewed(l *Lease) bool {
	switch {
	case l.redlock != nil:
		_, auto := l.redlock.m.cfg.holdTTL()
		return auto
	case l.parts != nil:
		return l.parts[0].renew
	}
	return l.renew
}

// renewerClosed reports whether l's Client stopped renewing (it was
// closed): its leases then run out rather than fail to renew.
func (l *Lease) renewerClosed() bool {
	if l.c == nil { // a Redlock's lease renews itself
		return false
	}
	l.c.renewer.mu.Lock()
	defer l.c.renewer.mu.Unlock()
	return l.c.renewer.closed
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
	if !l.unlocking.Load() {
		l.end(err)
	}
}

// heldLocally says whether the lease may still hold the lock as far as this
// process knows; an ended lease is not extended or inspected.
func (l *Lease) heldLocally() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isDone() || l.leftAt(time.Now()) <= 0 {
		return fmt.Errorf("%w: the lease of %q has ended", ErrNotHeld, l.name)
	}
	return nil
}

// released reports whether the lease ended by a release: only a release
// ends it without an error.
func (l *Lease) released() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.isDone() && l.err == nil
}

func (l *Lease) ended() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.isDone()
}

// isDone reports whether the lease has ended; l.mu must be held.
func (l *Lease) isDone() bool { return l.finished }

// confirmed sets the deadline after Redis confirmed an extension to ttl that
// was sent at sent (the caller holds extendMu). It may move the deadline in
// as well as out: the key now expires ttl after the extension arrived,
// whatever it had left before. A deadline that has already passed is not
// moved: from that moment the lease was reported lost, and stays so; the
// error says so (and the lease is ended here if no one has yet).
func (l *Lease) confirmed(sent time.Time, ttl time.Duration) error {
	l.mu.Lock()
	if l.isDone() {
		err := l.err
		l.mu.Unlock()
		if err == nil {
			return fmt.Errorf("%w: %q was released meanwhile", ErrNotHeld, l.name)
		}
		return err
	}
	if l.leftAt(time.Now()) <= 0 {
		l.mu.Unlock()
		l.end(errConfirmedLate)
		return errConfirmedLate
	}
	l.setDeadline(sent, ttl)
	l.timer.Reset(l.nextCheck(time.Now()))
	l.mu.Unlock()
	return nil
}

// inDoubt handles an Extend to ttl, sent at sent, whose outcome is unknown:
// Redis may have applied it, or may yet, from a command still waiting in a
// stalled server or a copy on its way. A longer TTL changes nothing the
// lease counts on. A shorter one may have cut the key's life: the lease
// counts on no more than it would leave, and renews at that TTL from now
// on, so that the key lives as long as the lease counts on it whichever
// extension Redis applies last.
func (l *Lease) inDoubt(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	if l.isDone() || ttl >= l.ttl {
		l.mu.Unlock()
		return
	}
	l.ttl = ttl
	if d := validUntil(sent, ttl, l.drift).Add(-l.slack); d.Before(l.deadline) {
		l.deadline = d
		if mid := halfWay(sent, d); mid.Before(l.riskAt) {
			l.riskAt = mid
		}
		l.timer.Reset(l.nextCheck(time.Now()))
	}
	l.mu.Unlock()
	if l.renew {
		l.c.renewer.reschedule(l, sent.Add(ttl/3))
	}
}

// leftAt is how long the lease has left at now (a time.Now reading), by
// whichever of its deadline's clocks ends first; l.mu must be held. The
// wall clock goes on while the machine is suspended, the monotonic one
// does not: after a resume, only the wall clock knows that Redis's TTL
// has run on.
func (l *Lease) leftAt(now time.Time) time.Duration {
	wallNow := now.Round(0).Add(time.Duration(wallClockSkew.Load()))
	return min(l.deadline.Sub(now), l.deadline.Round(0).Sub(wallNow))
}

// pastDeadline reports whether the lease's deadline has passed, by either
// of its clocks.
func (l *Lease) pastDeadline() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leftAt(time.Now()) <= 0
}

// expireIfPast ends the lease (each part of a MultiLock's) as lost when its
// deadline has passed. The deadline timer runs on the monotonic clock: after
// a suspension it fires late, and whoever looks first ends the lease.
func (l *Lease) expireIfPast() {
	if l.parts != nil {
		for _, p := range l.parts {
			p.expireIfPast()
		}
		return
	}
	l.mu.Lock()
	past := !l.isDone() && l.timer != nil && l.leftAt(time.Now()) <= 0
	l.mu.Unlock()
	if past {
		l.end(l.deadlineLoss())
	}
}

// checkDeadline runs when the lease's timer fires: at its risk point
// (see AtRisk), then at its deadline, unless a renewal moved them.
func (l *Lease) checkDeadline() {
	l.mu.Lock()
	if l.isDone() {
		l.mu.Unlock()
		return
	}
	now := time.Now()
	left := l.leftAt(now)
	if left <= 0 {
		l.mu.Unlock()
		l.end(l.deadlineLoss())
		return
	}
	atRisk := l.watched && !l.risky && !now.Before(l.riskAt)
	if atRisk {
		l.setRisky()
	}
	l.timer.Reset(l.nextCheck(now))
	whole := l.whole
	l.mu.Unlock()
	if atRisk {
		l.log.Warn("dlock: lease at risk: no renewal confirmed for half its time", "lock", l.name, "token", l.token, "left", left)
		if whole != nil {
			whole.markRisky()
		}
	}
}

// setDeadline counts the lease valid for validity from sent, when the
// acquire or extension that Redis confirmed was sent, and puts its risk
// point half way; l.mu must be held, or the lease not yet shared.
func (l *Lease) setDeadline(sent time.Time, validity time.Duration) {
	l.deadline = validUntil(sent, validity, l.drift).Add(-l.slack)
	l.riskAt = halfWay(sent, l.deadline)
}

// halfWay is the moment half way from sent to deadline.
func halfWay(sent, deadline time.Time) time.Time { return sent.Add(deadline.Sub(sent) / 2) }

// nextCheck is how long the lease's timer waits from now: to its risk
// point while an auto-renewed lease is not yet at risk, else to its
// deadline; l.mu must be held.
func (l *Lease) nextCheck(now time.Time) time.Duration {
	left := l.leftAt(now)
	if l.watched && !l.risky {
		return max(min(l.riskAt.Sub(now), left), 0)
	}
	return left
}

// AtRisk returns a channel that is closed once the lease is at risk: an
// auto-renewed lease with no renewal confirmed for half the time its last
// confirmed grant or renewal gave it (half the TTL, less drift). Renewals
// go every TTL/3, so a renewal has then failed, or is waiting on a Redis
// that does not answer, and a second try has not got through either:
// this is the moment to stop starting work that cannot be undone, or to
// checkpoint, while the lease still holds (Err is nil) and the deadline
// is a sixth of the TTL or more away. A lease whose renewal then
// succeeds holds on as before, but its AtRisk stays closed: a lease
// that was once in doubt is worth a log line, and [Lease.Deadline] tells
// how much time it has now.
//
// Half, rather than a later point, because the time from there to the
// deadline must cover what a holder does about it (a checkpoint, a
// hand-off), and an earlier point would fire on one renewal slowed by a
// busy server. A lease with a fixed lease time ([WithLeaseTime]) is not
// renewed, so running down is no risk: its AtRisk closes only on loss.
//
// A lost lease's AtRisk is closed too, before Done, so a caller that
// watches AtRisk alone learns of every loss; a release does not close
// it. A [MultiLock]'s lease is at risk when any of its parts is.
func (l *Lease) AtRisk() <-chan struct{} {
	l.expireIfPast()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.risk == nil {
		l.risk = make(chan struct{})
		if l.risky {
			close(l.risk)
		}
	}
	return l.risk
}

// setRisky marks the lease at risk once; l.mu must be held.
func (l *Lease) setRisky() {
	if l.risky {
		return
	}
	l.risky = true
	if l.risk != nil {
		close(l.risk)
	}
}

// markRisky marks the lease at risk (a MultiLock's, from a part).
func (l *Lease) markRisky() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.isDone() {
		l.setRisky()
	}
}

// end closes the lease once, with err nil for a release. A loss is logged
// before Done closes, so the log shows it before anyone reacts to it.
func (l *Lease) end(err error) {
	l.mu.Lock()
	if l.ending {
		l.mu.Unlock()
		return
	}
	l.ending = true
	ob := l.obs.Load() // under mu: see Observer.watch
	l.mu.Unlock()
	if err != nil {
		l.log.Warn("dlock: lease lost", "lock", l.name, "token", l.token, "err", err)
	}
	if ob != nil && err == nil { // a release: told before Done closes, on the caller's goroutine
		ob.ended(l, nil)
	}

	l.mu.Lock()
	l.err = err
	l.finished = true
	if err != nil {
		l.setRisky() // before Done: AtRisk tells of every loss
	}
	if l.done != nil {
		close(l.done)
	}
	if l.timer != nil { // a MultiLock's parts have their own
		l.timer.Stop()
	}
	callbacks := l.onEnd
	l.onEnd = nil
	l.mu.Unlock()

	if l.renew {
		l.c.renewer.remove(l)
	}
	for cb := range callbacks {
		(*cb)(cancelCause(err))
	}
	if ob != nil && err != nil {
		// A loss is found by the renewal loop or a timer: told once Done
		// has closed, on a goroutine of its own, so that no observer delays
		// the holder's signal or the renewals of other leases.
		go ob.ended(l, err)
	}
}

func cancelCause(err error) error {
	if err == nil {
		return context.Canceled
	}
	return err
}
