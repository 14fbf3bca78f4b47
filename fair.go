package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlockio/dlock/internal/scripts"
)

// FairMutex is an exclusive lock taken in the order it was asked for: the
// first Lock to wait is the first to get it. A release hands the lock to the
// head of the queue inside the release script, so neither the releaser
// taking it again nor a newcomer can barge in, and wakes that waiter alone.
//
// Waiters keep their place by renewing it every [WithWaiterRefresh]. A
// waiter that dies loses its place within three refreshes (3 s by default);
// if the lock is handed to it meanwhile, it holds the lock up for no longer
// than its place would have lasted. A Lock whose context ends leaves the
// queue at once, passing the lock on if it had just been handed to it.
//
// Its key is a [Mutex]'s, so [Client.Describe], ForceUnlock and a Mutex of
// the same name see its holds; but a Mutex does not queue, and its releases
// do not hand over, so do not mix the two on one name.
type FairMutex struct {
	c    *Client
	name string
	keys keys
	cfg  settings
	err  error // bad arguments, returned before any I/O

	// KEYS of the scripts in fair_lib.lua's order, up to the holder info, and of
	// a lease's extend and TTL: made once, shared by every attempt and lease.
	scriptKeys, extendKeys []string
}

var fairKind = &leaseKind{
	extend:  scripts.MutexExtend,
	release: scripts.FairRelease,
	ttl:     scripts.MutexTTL,
	abandon: scripts.FairAbandon,
}

// FairMutex returns the fair (first come, first served) lock called name.
// Options override the Client's defaults for this lock. Nothing is sent to
// Redis; a bad name or option is returned by the first TryLock or Lock,
// matching [ErrInvalid].
func (c *Client) FairMutex(name string, opts ...Option) *FairMutex {
	if c == nil {
		return &FairMutex{name: name, err: invalidf("nil dlock.Client")}
	}
	cfg := c.cfg.with(opts)
	k := c.waitingKeys(cfg.prefix, name)
	f := &FairMutex{c: c, name: name, cfg: cfg, keys: k,
		scriptKeys: []string{k.lock, k.fence, k.lock + ":queue", k.waiters, k.channel, k.holderInfo()},
		extendKeys: []string{k.lock, k.forced(), k.holderInfo()},
	}
	if f.err = validateName(name); f.err == nil {
		f.err = cfg.validate(forFair)
	}
	return f
}

// Name returns the lock's name.
func (f *FairMutex) Name() string { return f.name }

// TryLock makes one attempt and never waits. It takes the lock only when it
// is free and nobody waits for it: a TryLock does not overtake the queue.
// Otherwise it returns [ErrNotAcquired].
func (f *FairMutex) TryLock(ctx context.Context) (*Lease, error) {
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	if o := f.cfg.observer; o != nil {
		return o.acquire(ctx, KindFair, f.name, true, f.tryLock)
	}
	return f.tryLock(ctx)
}

func (f *FairMutex) tryLock(ctx context.Context) (*Lease, error) { return tryOnce(ctx, f.call()) }

// Lock takes the lock in its turn, waiting behind those who asked before,
// until ctx ends or the wait set by [WithWait] runs out. A wait that ends
// that way returns an error matching both [ErrNotAcquired] and ctx's error,
// and leaves the queue.
//
// Unless [WithLeaseTime] was given, the lease renews itself every TTL/3 until
// it is unlocked or lost.
func (f *FairMutex) Lock(ctx context.Context) (*Lease, error) {
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	if o := f.cfg.observer; o != nil {
		return o.acquire(ctx, KindFair, f.name, f.cfg.triesOnce(), f.lock)
	}
	return f.lock(ctx)
}

func (f *FairMutex) lock(ctx context.Context) (*Lease, error) {
	return f.c.waitFor(ctx, f.cfg, f.keys.own, f.call())
}

func (f *FairMutex) call() *fairAcquirer {
	owner := newOwnerToken()
	return &fairAcquirer{f: f, owner: owner, tombstone: f.keys.tombstone(owner)}
}

func (f *FairMutex) check(ctx context.Context) error {
	if f.err != nil {
		return f.err
	}
	return f.c.usable(ctx)
}

// fairAcquirer is one TryLock or Lock call: it keeps one owner token for all
// its attempts, since a release may hand the lock to it while it waits.
type fairAcquirer struct {
	f         *FairMutex
	owner     string
	tombstone string // named after owner: see keys.tombstone

	// Of the last attempt: when it was sent, and the fencing counter it
	// read when it queued (-1: it did not; the clock in µs less one when the
	// counter was gone), which a hand-over's token must exceed to have come
	// after it (see fair_lib.lua and token_floor in common.lua).
	sent   time.Time
	fenced int64
}

func (a *fairAcquirer) attempt(ctx context.Context, waiterID string) (*Lease, time.Duration, error) {
	f := a.f
	publish, err := f.c.publishCommand(ctx)
	if err != nil {
		return nil, 0, err
	}
	ttl, _ := f.cfg.holdTTL()
	keys := append(f.scriptKeys[:len(f.scriptKeys):len(f.scriptKeys)], a.tombstone)
	a.sent, a.fenced = time.Now(), -1
	cmd, unconfirmed := f.c.runAcquire(ctx, f.cfg, scripts.FairAcquire, keys,
		a.owner, ttl.Milliseconds(), f.entry(waiterID), waiterLease(f.cfg.waiterRefresh).Milliseconds(), publish, f.cfg.holderInfo)
	res, err := cmd.Int64Slice()
	if err == nil && (len(res) < 2 || len(res) > 3 || res[0] == -1) {
		err = errUnexpectedReply // -1 answers only a call already abandoned
	}
	if err != nil {
		if !isWrongType(err) {
			a.abandon(ctx, waiterID)
		}
		return nil, 0, redisError("lock", f.name, err)
	}
	if res[0] != 1 {
		if len(res) == 3 {
			a.fenced = res[2]
		}
		return nil, time.Duration(res[1]) * time.Millisecond, nil
	}
	if unconfirmed != nil {
		a.abandon(ctx, waiterID)
		return nil, 0, fmt.Errorf("dlock: lock %q: %w", f.name, unconfirmed)
	}
	return a.lease(uint64(res[1]), 0), 0, nil
}

// granted takes the lock a release handed over (see fair_lib.lua). A token
// above the counter the last attempt read was minted after that attempt, so
// that attempt's sending starts the lease; any other is stale (that hold
// ran out before the attempt found the lock not ours) and gives nil.
func (a *fairAcquirer) granted(h handOver) *Lease {
	if h.ref != "" || a.fenced < 0 || h.token <= uint64(a.fenced) {
		return nil
	}
	a.fenced = -1 // the hand-over took it out of the queue
	return a.lease(h.token, h.valid)
}

// lease starts the lease of a hold granted for validity (0: the TTL) from
// the last attempt's sending.
func (a *fairAcquirer) lease(token uint64, validity time.Duration) *Lease {
	f := a.f
	return f.c.startLease(leaseSpec{
		name: f.name, kind: fairKind, keys: f.extendKeys, relKeys: f.scriptKeys, mark: f.keys.lock, tombstone: a.tombstone,
		owner: a.owner, token: token, sent: a.sent, validity: validity, cfg: f.cfg,
	})
}

func (a *fairAcquirer) queues() {}

// leave also passes on the lock, should a release have handed it over just
// as this waiter gave up.
func (a *fairAcquirer) leave(ctx context.Context, waiterID string) { a.abandon(ctx, waiterID) }

// abandon gives up the Lock call: its place in the queue, a hold it may
// have, and any attempt still on its way; see fair_abandon.lua. A Lock that
// goes on waiting (see [ErrUnavailable]) goes on as a new call, under a new
// owner token (the tombstone is the old one's), at the back of the queue.
func (a *fairAcquirer) abandon(ctx context.Context, waiterID string) {
	f := a.f
	keys := append(f.scriptKeys[:len(f.scriptKeys):len(f.scriptKeys)], a.tombstone)
	f.c.abandon(ctx, f.name, fairKind.abandon, keys, f.cfg.logger, a.owner, tombstoneLifeMillis, f.entry(waiterID))
	a.owner = newOwnerToken()
	a.tombstone = f.keys.tombstone(a.owner)
}

func (a *fairAcquirer) client() *Client { return a.f.c }

// entry is how a waiter queues (after its owner token, see fair_lib.lua):
// tagged with its Client, then its holder info, which a hand-over stores
// for it; "" (not queueing) stays "".
func (f *FairMutex) entry(waiterID string) string {
	if waiterID == "" {
		return ""
	}
	return f.c.tagged(waiterID) + f.cfg.holderInfo
}
