package dlock

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

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

	// The KEYS of every lease's extend/TTL script: the same for all
	// acquisitions, so made once and shared (scripts never modify them).
	extendKeys []string

	boxed atomic.Pointer[mutexArgv] // see argv
}

// mutexArgv is what the EVALSHA commands of one Mutex's acquisitions and
// releases share, boxed once, on first use: a lock+unlock then boxes only
// its owner token and tombstone (rather than every key name and number,
// twice), which is a fifth of its allocations. A handle used once pays what
// it paid before.
type mutexArgv struct {
	acquire                    []any // evalsha, sha, 4, lock, fence
	waiters, ttl, registration any   // acquire's KEYS[4], ARGV[2], ARGV[4]
	release                    []any // evalsha, sha, 3, lock, channel, waiters
}

func (m *Mutex) argv() *mutexArgv {
	if a := m.boxed.Load(); a != nil {
		return a
	}
	ttl, _ := m.cfg.holdTTL()
	k := m.keys
	m.boxed.CompareAndSwap(nil, &mutexArgv{
		acquire:      []any{"evalsha", scripts.MutexAcquire.Hash(), 4, k.lock, k.fence},
		waiters:      k.waiters,
		ttl:          ttl.Milliseconds(),
		registration: waiterLease(m.cfg.waiterRefresh).Milliseconds(),
		release:      []any{"evalsha", scripts.MutexRelease.Hash(), 3, k.lock, k.channel, k.waiters},
	})
	return m.boxed.Load()
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
		extendKeys: []string{k.lock}}
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
	var cmd *redis.Cmd
	var unconfirmed error
	a := m.argv()
	if m.cfg.replicaAck == 0 {
		argv := make([]any, 0, len(a.acquire)+6)
		argv = append(argv, a.acquire...)
		argv = append(argv, tombstone, a.waiters, owner, a.ttl, waiterID, a.registration)
		cmd = m.c.scripts.runArgv(ctx, scripts.MutexAcquire, argv)
	} else {
		cmd, unconfirmed = m.c.runAcquire(ctx, m.cfg, scripts.MutexAcquire, []string{m.keys.lock, m.keys.fence, tombstone, m.keys.waiters},
			owner, ttl.Milliseconds(), waiterID, waiterLease(m.cfg.waiterRefresh).Milliseconds())
	}
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
		name: m.name, kind: mutexKind, keys: m.extendKeys, relHead: a.release,
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
