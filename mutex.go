package dlock

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/scripts"
)

// Mutex is a distributed exclusive lock: at most one lease on its name is held
// at a time (within the limits of leases: see the package documentation).
// It is a handle, safe for concurrent use; each acquisition returns its own
// [Lease].
type Mutex struct {
	c    *Client
	name string
	keys keys
	cfg  settings
	err  error // bad arguments, returned before any I/O

	// The KEYS of every lease's extend/TTL script: the same for all
	// acquisitions, so made once and shared (scripts never modify them).
	extendKeys []string

	boxed atomic.Pointer[mutexArgv] // see argv
}

// mutexArgv is what the EVALSHA commands of one Mutex's acquisitions and
// releases share, boxed once, on first use: a lock+unlock then boxes only
// its owner token, tombstone and release mark (rather than every key name and number,
// twice), which is a fifth of its allocations. A handle used once boxes
// each key name once, for both commands, and the scripts' SHAs not at all.
type mutexArgv struct {
	acquire                    []any // evalsha, sha, 5, lock, fence
	waiters, ttl, registration any   // acquire's KEYS[4], ARGV[2], ARGV[4]
	holder, info               any   // acquire's KEYS[5], ARGV[6]
	release                    []any // evalsha, sha, 6, lock, channel, waiters, fence, holder (the lease adds its mark)
}

func (m *Mutex) argv() *mutexArgv {
	if a := m.boxed.Load(); a != nil {
		return a
	}
	ttl, _ := m.cfg.holdTTL()
	lock, fence, waiters := any(m.keys.lock), any(m.keys.fence), any(m.keys.waiters)
	holder := any(m.keys.holderInfo())
	m.boxed.CompareAndSwap(nil, &mutexArgv{
		acquire:      []any{"evalsha", mutexAcquireSHA, 5, lock, fence},
		waiters:      waiters,
		ttl:          boxMillis(ttl),
		registration: boxMillis(waiterLease(m.cfg.waiterRefresh)),
		holder:       holder,
		info:         m.cfg.holderInfo,
		release:      []any{"evalsha", mutexReleaseSHA, 6, lock, m.keys.channel, waiters, fence, holder},
	})
	return m.boxed.Load()
}

// The SHAs of the scripts every Mutex handle sends, boxed once.
var mutexAcquireSHA, mutexReleaseSHA any = scripts.MutexAcquire.Hash(), scripts.MutexRelease.Hash()

// boxMillis is d in ms as an EVALSHA argument: the defaults (a TTL, a
// waiter's registration) boxed once, others anew.
func boxMillis(d time.Duration) any {
	switch d {
	case DefaultTTL:
		return defaultTTLMillis
	case waiterLease(DefaultWaiterRefresh):
		return defaultRegistrationMillis
	}
	return d.Milliseconds()
}

var defaultTTLMillis, defaultRegistrationMillis any = DefaultTTL.Milliseconds(), waiterLease(DefaultWaiterRefresh).Milliseconds()

var mutexKind = &leaseKind{
	extend:  scripts.MutexExtend,
	release: scripts.MutexRelease,
	ttl:     scripts.MutexTTL,
	abandon: scripts.MutexAbandon,
}

// Mutex returns the exclusive lock called name. Options override the
// Client's defaults for this lock. Nothing is sent to Redis; a bad name or
// option is returned by the first TryLock or Lock, matching [ErrInvalid].
func (c *Client) Mutex(name string, opts ...Option) *Mutex {
	if c == nil {
		return &Mutex{name: name, err: invalidf("nil dlock.Client")}
	}
	cfg := c.cfg.with(opts)
	k := c.waitingKeys(cfg.prefix, name)
	m := &Mutex{c: c, name: name, cfg: cfg, keys: k,
		extendKeys: []string{k.lock, k.forced(), k.holderInfo()}}
	if m.err = validateName(name); m.err == nil {
		m.err = cfg.validate(forMutex)
	}
	return m
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.name }

// TryLock makes one attempt to take the lock and never waits. It returns
// [ErrNotAcquired] when someone else holds it, and an error matching
// [ErrUnavailable] when Redis cannot serve it for a while (a failover, a
// slot being migrated): trying again later may succeed. Like Lock's, its lease renews
// itself unless [WithLeaseTime] was given.
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	if o := m.cfg.observer; o != nil {
		return o.acquire(ctx, KindMutex, m.name, true, m.tryLock)
	}
	return m.tryLock(ctx)
}

func (m *Mutex) tryLock(ctx context.Context) (*Lease, error) { return tryOnce(ctx, m.call()) }

// Lock takes the lock, waiting for its release while someone else holds it,
// until ctx ends or the wait set by [WithWait] runs out. A wait that ends
// that way returns an error matching both [ErrNotAcquired] and ctx's error.
// A release hands the lock to one waiting Lock, which then holds it without
// asking again; a newcomer does not barge in ahead of waiters. Errors that
// pass on their own ([ErrUnavailable]) do not end the wait: it tries again,
// backing off.
//
// Unless [WithLeaseTime] was given, the lease renews itself every TTL/3 until
// it is unlocked or lost.
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	if o := m.cfg.observer; o != nil {
		return o.acquire(ctx, KindMutex, m.name, m.cfg.triesOnce(), m.lock)
	}
	return m.lock(ctx)
}

func (m *Mutex) lock(ctx context.Context) (*Lease, error) {
	return m.c.waitFor(ctx, m.cfg, m.keys.own, m.call())
}

func (m *Mutex) check(ctx context.Context) error {
	if m.err != nil {
		return m.err
	}
	return m.c.usable(ctx)
}

// mutexCall is one TryLock or Lock call. It keeps one owner token for all
// its attempts, since a release may hand the lock to it while it waits, and
// numbers its registrations, so that it can tell a hand-over for its latest
// one from a stale one.
type mutexCall struct {
	m          *Mutex
	owner      string
	tombstone  string // named after owner: see keys.tombstone
	attempts   int
	registered string    // the registration the last refused attempt made
	sent       time.Time // when the last attempt was sent
}

func (m *Mutex) call() *mutexCall {
	owner := newOwnerToken()
	return &mutexCall{m: m, owner: owner, tombstone: m.keys.tombstone(owner)}
}

func (a *mutexCall) attempt(ctx context.Context, waiterID string) (*Lease, time.Duration, error) {
	m := a.m
	ttl, _ := m.cfg.holdTTL()
	tombstone := a.tombstone
	a.attempts++
	entry := ""
	if waiterID != "" {
		entry = m.c.tagged(waiterID) + ":" + strconv.Itoa(a.attempts) + ":" + strconv.FormatInt(ttl.Milliseconds(), 10) + ":" + a.owner + m.cfg.holderInfo
	}
	a.sent = time.Now()
	var cmd *redis.Cmd
	var unconfirmed error
	b := m.argv()
	if m.cfg.replicaAck == 0 {
		argv := make([]any, 0, len(b.acquire)+9)
		argv = append(argv, b.acquire...)
		argv = append(argv, tombstone, b.waiters, b.holder, a.owner, b.ttl, entry, b.registration, a.registered, b.info)
		cmd = m.c.flights.runArgv(ctx, scripts.MutexAcquire, argv)
	} else {
		cmd, unconfirmed = m.c.runAcquire(ctx, m.cfg, scripts.MutexAcquire, []string{m.keys.lock, m.keys.fence, tombstone, m.keys.waiters, m.keys.holderInfo()},
			a.owner, ttl.Milliseconds(), entry, waiterLease(m.cfg.waiterRefresh).Milliseconds(), a.registered, m.cfg.holderInfo)
	}
	res, err := cmd.Int64Slice()
	if err == nil && (len(res) != 2 || res[0] == -1) {
		err = errUnexpectedReply // -1 answers only a call already abandoned
	}
	if err != nil {
		if !isWrongType(err) {
			a.abandon(ctx, entry)
		}
		return nil, 0, redisError("lock", m.name, err)
	}
	if res[0] != 1 {
		if entry != "" {
			a.registered = entry
		}
		return nil, time.Duration(res[1]) * time.Millisecond, nil
	}
	if unconfirmed != nil {
		a.abandon(ctx, entry)
		return nil, 0, fmt.Errorf("dlock: lock %q: %w", m.name, unconfirmed)
	}
	return a.lease(uint64(res[1]), 0), 0, nil
}

// granted takes the lock a release handed over for the attempt h names (see
// hand_next.lua). The hand-over came after that attempt was applied, so its
// sending starts the lease; one for an earlier attempt is stale (that hold
// ran out before the latest attempt found the lock not ours) and gives nil.
func (a *mutexCall) granted(h handOver) *Lease {
	if h.ref != strconv.Itoa(a.attempts) || a.registered == "" {
		return nil
	}
	a.registered = "" // popped by the hand-over
	return a.lease(h.token, h.valid)
}

// lease starts the lease of a hold granted for validity (0: the TTL) from
// the last attempt's sending.
func (a *mutexCall) lease(token uint64, validity time.Duration) *Lease {
	m := a.m
	return m.c.startLease(leaseSpec{
		name: m.name, kind: mutexKind, keys: m.extendKeys, relHead: m.argv().release, mark: m.keys.lock, tombstone: a.tombstone,
		owner: a.owner, token: token, sent: a.sent, validity: validity, cfg: m.cfg,
	})
}

// leave withdraws the call's registration; a hold a release may have handed
// it meanwhile is passed on. A copy of an attempt may still be on its way
// (go-redis resends after a read timeout): the tombstone refuses it.
func (a *mutexCall) leave(ctx context.Context, waiterID string) { a.abandon(ctx, "") }

// abandon gives up the call after an attempt (whose registration is entry;
// "" when it left with none in doubt): a hold it may have, any copy of its
// attempts still on its way (a tombstone), and its registrations. The
// tombstone is the owner's, so a Lock that goes on waiting (see
// [ErrUnavailable]) goes on as a new call, under a new owner token.
func (a *mutexCall) abandon(ctx context.Context, entry string) {
	m := a.m
	withdraw, before := entry, a.registered
	if withdraw == "" {
		withdraw, before = before, ""
	}
	m.c.abandon(ctx, m.name, mutexKind.abandon,
		[]string{m.keys.lock, m.keys.channel, a.tombstone, m.keys.waiters, m.keys.fence, m.keys.holderInfo()},
		m.cfg.logger, a.owner, tombstoneLifeMillis, withdraw, before)
	a.owner = newOwnerToken()
	a.tombstone = m.keys.tombstone(a.owner)
}

func (a *mutexCall) client() *Client { return a.m.c }
