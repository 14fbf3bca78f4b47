package dlock

import (
	"context"
	"fmt"
	"log/slog"
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
// TTL × (1 − drift), on this process's monotonic clock.
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

	unlockMu  sync.Mutex  // one Unlock at a time, so their outcomes are not crossed
	unlocking atomic.Bool // set before a release is sent: renewals stop counting
	renew     bool

	// unconfirmed: the grant arrived late (see startLease), so it has no
	// deadline timer nor renewals until confirmGrant extends it.
	// Set by startLease, cleared by confirmGrant, before any other use.
	unconfirmed bool

	// Under mu, with the fields below it; here, they pack with the flags
	// above (ten thousand held leases are worth a few bytes each).
	finished bool // the lease has ended
	ending   bool // end has begun: only its first call counts

	// extendMu keeps one extension (Extend or renewal) of this lease in
	// flight at a time. Each sets the key's expiry anew, possibly shorter;
	// the deadline must follow the one Redis applied last, and only one at a
	// time makes that the one whose reply came last.
	extendMu sync.Mutex

	mu       sync.Mutex
	ttl      time.Duration // what each renewal asks for
	deadline time.Time     // monotonic; moves only on a confirmed renewal
	timer    *time.Timer   // fires at deadline
	done     chan struct{} // made by the first Done, closed once finished
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

	// A Redlock's lease is held on a majority of nodes, not through c.
	redlock *redlockHold
	slack   time.Duration // given up besides TTL × drift (a Redlock's 2 ms)
}

// groupTokens are the locks of a MultiLock group held by one lease, and the
// fencing token of each.
type groupTokens struct {
	names  []string
	tokens []uint64
}

// leaseKind is what differs between lock types: the scripts that renew,
// release, inspect and give up one hold. Every kind's scripts take the owner
// token as ARGV[1]; extend takes the TTL in ms as ARGV[2] and returns 1 or 0;
// release and abandon take the publish command as ARGV[2] (abandon then the
// tombstone's lifetime in ms and the waiter id) and return 1 or 0; ttl
// returns milliseconds left, or -3 when not held.
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
	relHead []any    // or release's EVALSHA command up to the owner, boxed by the type (see Mutex.argv)
	owner   string
	token   uint64
	sent    time.Time // when the acquire that granted it was sent
	cfg     settings

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
		c: c, name: spec.name, kind: spec.kind, keys: spec.keys, relHead: spec.relHead,
		owner: spec.owner, token: spec.token, drift: spec.cfg.drift, renew: autoRenew,
		log: spec.cfg.logger, ttl: ttl,
		deadline:  validUntil(spec.sent, validity, spec.cfg.drift),
		heapIndex: -1,
	}
	if l.relHead == nil {
		l.relHead = evalshaArgv(spec.kind.release, spec.relKeys, nil)
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
	l.timer = time.AfterFunc(time.Until(l.deadline), l.checkDeadline)
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
	n, err := l.kind.extend.Run(ctx, l.c.rdb, l.keys, l.owner, l.ttl.Milliseconds()).Int64()
	switch {
	case err != nil:
		return redisError("confirm", l.name, err)
	case n != 1:
		return errGrantExpired
	}
	l.unconfirmed = false
	l.deadline = validUntil(sent, l.ttl, l.drift).Add(-l.slack)
	l.start(sent, l.ttl)
	return nil
}

// validUntil is how long a hold sent at sent, for ttl, can be counted on.
func validUntil(sent time.Time, ttl time.Duration, drift float64) time.Time {
	return sent.Add(ttl - time.Duration(float64(ttl)*drift))
}

// Name returns the name of the lock this lease holds; for a [MultiLock]'s,
// the names it holds, sorted, joined by commas.
func (l *Lease) Name() string { return l.name }

// Token returns the fencing token of this hold: larger than the token of every
// earlier hold of the same lock name (for as long as the lock's data lives in
// Redis). Pass it to the resource the lock protects and have the resource
// refuse any token lower than the highest it has seen. A [MultiLock]'s lease
// holds a token per name: Token is the first's, [Lease.Tokens] has them all.
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
	if l.parts != nil {
		return l.partsErr()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isDone() {
		return l.err
	}
	if !time.Now().Before(l.deadline) {
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
// is confirmed before it. It carries a monotonic clock reading.
func (l *Lease) Deadline() time.Time {
	if l.parts != nil {
		return l.partsDeadline()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Context returns a context derived from parent that is cancelled when the
// lease ends; [context.Cause] then reports an error matching [ErrLeaseLost]
// if it was lost. Work done under the lock with this context stops by itself
// when the lock goes.
func (l *Lease) Context(parent context.Context) context.Context {
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
// and makes ttl the TTL of later automatic renewals. It never re-creates a
// lock that has gone: then it returns [ErrNotHeld] and the lease is lost.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
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
	l.extendMu.Lock()
	defer l.extendMu.Unlock()
	sent := time.Now()
	n, err := l.kind.extend.Run(ctx, l.c.rdb, l.keys, l.owner, ttl.Milliseconds()).Int64()
	if err != nil {
		return redisError("extend", l.name, err)
	}
	if n != 1 {
		l.refused()
		return fmt.Errorf("%w: extend of %q refused: the lock expired or was taken", ErrNotHeld, l.name)
	}
	l.mu.Lock()
	l.ttl = ttl
	l.mu.Unlock()
	l.confirmed(sent, ttl)
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
	ms, err := l.kind.ttl.Run(ctx, l.c.rdb, l.keys, l.owner).Int64()
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
// already cancelled (bounded by [CleanupTimeout]): a cancelled caller must not
// leave its lock behind.
//
// It returns [ErrNotHeld] when there was nothing of ours left to release: the
// lease was released before, or was lost and someone else may hold the lock.
// A lease that was lost but still held in Redis (a renewal that could not get
// through in time) is released all the same, and Unlock returns nil.
func (l *Lease) Unlock(ctx context.Context) error {
	l.unlockMu.Lock()
	defer l.unlockMu.Unlock()
	if l.released() {
		return fmt.Errorf("%w: %q was already released", ErrNotHeld, l.name)
	}
	l.unlocking.Store(true)
	if l.parts != nil {
		return l.unlockParts(ctx)
	}
	if l.redlock != nil {
		return l.redlock.unlock(ctx, l)
	}
	l.c.renewer.remove(l)

	ok, err := l.c.releaseArgv(ctx, l.kind.release, l.relHead, l.owner)
	if err != nil {
		// Whether Redis let go is unknown; it does within the TTL at the latest.
		l.end(fmt.Errorf("%w: unlock did not complete", ErrLeaseLost))
		return redisError("unlock", l.name, err)
	}
	if !ok {
		l.end(errRenewalRefused)
		return fmt.Errorf("%w: %q expired or was taken before unlock", ErrNotHeld, l.name)
	}
	l.end(nil)
	return nil
}

var (
	errDeadlinePassed = fmt.Errorf("%w: no renewal confirmed before its deadline", ErrLeaseLost)
	errRenewalRefused = fmt.Errorf("%w: the lock expired, was deleted or is held by another owner", ErrLeaseLost)
)

// refused ends the lease as lost after Redis said it is not ours, unless an
// Unlock has begun: its own release may be what Redis saw, and Unlock ends
// the lease as it finds.
func (l *Lease) refused() {
	if !l.unlocking.Load() {
		l.end(errRenewalRefused)
	}
}

// heldLocally says whether the lease may still hold the lock as far as this
// process knows; an ended lease is not extended or inspected.
func (l *Lease) heldLocally() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isDone() || !time.Now().Before(l.deadline) {
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
// moved: from that moment the lease was reported lost, and stays so.
func (l *Lease) confirmed(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isDone() || !time.Now().Before(l.deadline) {
		return
	}
	l.deadline = validUntil(sent, ttl, l.drift).Add(-l.slack)
	l.timer.Reset(time.Until(l.deadline))
}

// checkDeadline runs when the deadline timer fires.
func (l *Lease) checkDeadline() {
	l.mu.Lock()
	if l.isDone() {
		l.mu.Unlock()
		return
	}
	if left := time.Until(l.deadline); left > 0 { // moved by a renewal meanwhile
		l.timer.Reset(left)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.end(errDeadlinePassed)
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
	l.mu.Unlock()
	if err != nil {
		l.log.Warn("dlock: lease lost", "lock", l.name, "token", l.token, "err", err)
	}

	l.mu.Lock()
	l.err = err
	l.finished = true
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
}

func cancelCause(err error) error {
	if err == nil {
		return context.Canceled
	}
	return err
}
