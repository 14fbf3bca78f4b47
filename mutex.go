package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlockio/dlock/scripts"
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

	// The KEYS of every lease's extend/TTL and release scripts: the same for
	// all acquisitions, so made once and shared (scripts never modify them).
	extendKeys, releaseKeys []string
}

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
	k := keysFor(cfg.prefix, name)
	m := &Mutex{c: c, name: name, cfg: cfg, keys: k,
		extendKeys: []string{k.lock}, releaseKeys: []string{k.lock, k.channel, k.waiters}}
	if m.err = validateName(name); m.err == nil {
		m.err = cfg.validate()
	}
	return m
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.name }

// TryLock makes one attempt to take the lock and never waits. It returns
// [ErrNotAcquired] when someone else holds it. Like Lock's, its lease renews
// itself unless [WithLeaseTime] was given.
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	return tryOnce(ctx, m)
}

// Lock takes the lock, waiting for its release while someone else holds it,
// until ctx ends or the wait set by [WithWait] runs out. A wait that ends
// that way returns an error matching both [ErrNotAcquired] and ctx's error.
//
// Unless [WithLeaseTime] was given, the lease renews itself every TTL/3 until
// it is unlocked or lost.
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	return m.c.waitFor(ctx, m.cfg, m.keys.channel, m)
}

func (m *Mutex) check() error {
	if m.err != nil {
		return m.err
	}
	return m.c.usable()
}

func (m *Mutex) attempt(ctx context.Context, waiterID string) (*Lease, time.Duration, error) {
	owner := newOwnerToken()
	ttl, _ := m.cfg.holdTTL()
	tombstone := m.keys.tombstone(owner)
	sent := time.Now()
	cmd, unconfirmed := m.c.runAcquire(ctx, m.cfg, scripts.MutexAcquire, []string{m.keys.lock, m.keys.fence, tombstone, m.keys.waiters},
		owner, ttl.Milliseconds(), waiterID, waiterLease(m.cfg.waiterRefresh).Milliseconds())
	res, err := cmd.Int64Slice()
	if err == nil && (len(res) != 2 || res[0] == -1) {
		err = errUnexpectedReply // -1 answers only an attempt already abandoned
	}
	if err != nil {
		if !isWrongType(err) {
			m.abandon(ctx, owner, waiterID)
		}
		return nil, 0, redisError("lock", m.name, err)
	}
	if res[0] != 1 {
		return nil, time.Duration(res[1]) * time.Millisecond, nil
	}
	if unconfirmed != nil {
		m.abandon(ctx, owner, waiterID)
		return nil, 0, fmt.Errorf("dlock: lock %q: %w", m.name, unconfirmed)
	}
	return m.c.startLease(leaseSpec{
		name: m.name, kind: mutexKind, keys: m.extendKeys, relKeys: m.releaseKeys,
		owner: owner, token: uint64(res[1]), sent: sent, cfg: m.cfg,
	}), 0, nil
}

func (m *Mutex) leave(ctx context.Context, waiterID string) { m.abandon(ctx, "", waiterID) }

// abandon gives up an attempt whose outcome is unknown (owner), a waiter's
// registration (waiterID), or both; see mutex_abandon.lua.
func (m *Mutex) abandon(ctx context.Context, owner, waiterID string) {
	ttl, _ := m.cfg.holdTTL()
	m.c.abandon(ctx, m.name, mutexKind.abandon,
		[]string{m.keys.lock, m.keys.channel, m.keys.tombstone(owner), m.keys.waiters},
		m.cfg.logger, owner, ttl.Milliseconds(), waiterID)
}
