package dlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/scripts"
)

// MultiLock takes several exclusive locks together: all of them, or none.
// Its lease is one [Lease], lost as soon as any of its locks is lost, with a
// fencing token per lock ([Lease.Tokens]). Each lock is a [Mutex] of its
// name, so a MultiLock and Mutex handles of the same names exclude each
// other.
//
// Where all the names are on one server, or in one slot of a Redis Cluster,
// the locks are taken by one script, atomically. Across slots, the locks of
// each slot are taken by one script, slot after slot in increasing slot
// order: every MultiLock takes its slots in that one global order, so two of
// them that want the same locks cannot each hold what the other waits for.
// A MultiLock that fails or gives up part way (its context ended, an error)
// releases what it took before returning: it never leaves a partial hold.
//
// While it waits it is registered with one of the locks in its way at a
// time, and woken by that lock's release. It does not queue for the others:
// under constant contention for its locks one by one, it is not fair.
type MultiLock struct {
	c      *Client
	name   string
	names  []string
	cfg    settings
	err    error // bad arguments, returned before any I/O
	groups []lockGroup
}

// lockGroup is the locks of a MultiLock that one script takes together.
type lockGroup struct {
	name     string   // the group's names joined, for errors and the lease
	names    []string // sorted
	keys     []string // four per lock: lock, fence, waiters, channel (multi_lib.lua)
	channels []string
	first    keys // the first lock's, whose tombstone an attempt uses
}

var multiKind = &leaseKind{
	extend:  scripts.MultiExtend,
	release: scripts.MultiRelease,
	ttl:     scripts.MultiTTL,
	abandon: scripts.MultiAbandon,
}

// MultiLock returns the locks of names, taken together. The order of names
// does not matter, and a name given twice counts once. Options override the
// Client's defaults; [WithWait] bounds the whole wait. Nothing is sent to
// Redis; bad names or options (no names at all, an empty one…) are returned
// by the first TryLock or Lock, matching [ErrInvalid].
func (c *Client) MultiLock(names []string, opts ...Option) *MultiLock {
	sorted := slices.Compact(slices.Sorted(slices.Values(names)))
	m := &MultiLock{c: c, name: strings.Join(sorted, ","), names: sorted}
	if c == nil {
		m.err = invalidf("nil dlock.Client")
		return m
	}
	m.cfg = c.cfg.with(opts)
	if len(sorted) == 0 {
		m.err = invalidf("a MultiLock of no locks")
		return m
	}
	for _, name := range sorted {
		if m.err = validateName(name); m.err != nil {
			return m
		}
	}
	if m.err = m.cfg.validate(); m.err != nil {
		return m
	}
	for _, names := range c.groupBySlot(sorted) {
		g := lockGroup{name: strings.Join(names, ","), names: names, first: keysFor(m.cfg.prefix, names[0])}
		for _, name := range names {
			k := keysFor(m.cfg.prefix, name)
			g.keys = append(g.keys, k.lock, k.fence, k.waiters, k.channel)
			g.channels = append(g.channels, k.channel)
		}
		m.groups = append(m.groups, g)
	}
	return m
}

// groupBySlot splits sorted lock names into the groups one script can take:
// one per cluster slot, in slot order, on a Redis Cluster; one per name on a
// Ring, whose shards are picked by name; all in one elsewhere.
func (c *Client) groupBySlot(names []string) [][]string {
	switch c.rdb.(type) {
	case *redis.ClusterClient:
		bySlot := slices.Clone(names)
		slices.SortStableFunc(bySlot, func(a, b string) int { return cmp.Compare(clusterSlot(a), clusterSlot(b)) })
		var groups [][]string
		for i, name := range bySlot {
			if i > 0 && clusterSlot(name) == clusterSlot(bySlot[i-1]) {
				groups[len(groups)-1] = append(groups[len(groups)-1], name)
				continue
			}
			groups = append(groups, []string{name})
		}
		return groups
	case *redis.Ring:
		groups := make([][]string, len(names))
		for i, name := range names {
			groups[i] = []string{name}
		}
		return groups
	}
	return [][]string{names}
}

// Names returns the names of the locks, sorted, without repeats.
func (m *MultiLock) Names() []string { return slices.Clone(m.names) }

// TryLock makes one attempt at each group of locks and never waits. It
// returns [ErrNotAcquired], holding nothing, when any lock is held.
func (m *MultiLock) TryLock(ctx context.Context) (*Lease, error) {
	return m.acquire(ctx, true)
}

// Lock takes all the locks, waiting while any is held, until ctx ends or
// the wait set by [WithWait] runs out. A wait that ends that way returns an
// error matching both [ErrNotAcquired] and ctx's error, holding nothing.
//
// Unless [WithLeaseTime] was given, the lease renews itself every TTL/3
// until it is unlocked or lost.
func (m *MultiLock) Lock(ctx context.Context) (*Lease, error) {
	return m.acquire(ctx, false)
}

func (m *MultiLock) acquire(ctx context.Context, try bool) (*Lease, error) {
	if m.err != nil {
		return nil, m.err
	}
	if err := m.c.usable(); err != nil {
		return nil, err
	}
	cfg := m.cfg
	if cfg.waitSet && !try { // one wait for all the groups, not one each
		if cfg.wait == 0 {
			try = true
		} else {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, cfg.wait)
			defer cancel()
		}
		cfg.waitSet = false
	}
	held := make([]*Lease, 0, len(m.groups))
	for i := range m.groups {
		a := &multiAcquirer{m: m, g: &m.groups[i]}
		var l *Lease
		var err error
		if try {
			l, err = tryOnce(ctx, a)
		} else {
			l, err = m.c.waitFor(ctx, cfg, a.g.channels[0], a)
		}
		if err != nil {
			m.rollBack(ctx, held)
			return nil, err
		}
		held = append(held, l)
	}
	if len(held) == 1 {
		return held[0], nil
	}
	return m.c.combineLeases(m.name, held), nil
}

// rollBack releases the groups taken before one failed. Unlock releases
// whatever ctx; where it cannot, the holds expire with their TTL.
func (m *MultiLock) rollBack(ctx context.Context, held []*Lease) {
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil {
			m.cfg.logger.Warn("dlock: could not release part of a MultiLock that failed; it expires with its TTL",
				"lock", l.name, "err", err)
		}
	}
}

// multiAcquirer takes one group of a MultiLock. It listens on the channel
// of one lock of the group at a time, the one that kept it out last.
type multiAcquirer struct {
	m           *MultiLock
	g           *lockGroup
	watch, busy int // the lock listened on, and the one in the way
}

func (a *multiAcquirer) attempt(ctx context.Context, waiterID string) (*Lease, time.Duration, error) {
	m, g := a.m, a.g
	publish, err := m.c.publishCommand(ctx)
	if err != nil {
		return nil, 0, err
	}
	owner := newOwnerToken()
	ttl, _ := m.cfg.holdTTL()
	keys := append(g.keys[:len(g.keys):len(g.keys)], g.first.tombstone(owner))
	sent := time.Now()
	cmd, unconfirmed := m.c.runAcquire(ctx, m.cfg, scripts.MultiAcquire, keys, owner, ttl.Milliseconds(), waiterID,
		waiterLease(m.cfg.waiterRefresh).Milliseconds(), a.watch+1, publish)
	res, err := cmd.Int64Slice()
	if err == nil && !a.validReply(res) {
		err = errUnexpectedReply // -1 answers only an attempt already abandoned
	}
	if err != nil {
		if !isWrongType(err) {
			a.abandon(ctx, owner, waiterID)
		}
		return nil, 0, redisError("lock", g.name, err)
	}
	if res[0] == 0 {
		a.busy = int(res[2]) - 1
		return nil, time.Duration(res[1]) * time.Millisecond, nil
	}
	if unconfirmed != nil {
		a.abandon(ctx, owner, waiterID)
		return nil, 0, fmt.Errorf("dlock: lock %q: %w", g.name, unconfirmed)
	}
	tokens := make([]uint64, len(g.names))
	for i := range tokens {
		tokens[i] = uint64(res[i+1])
	}
	return m.c.startLease(leaseSpec{
		name: g.name, kind: multiKind, keys: g.keys, relKeys: g.keys,
		owner: owner, token: tokens[0], sent: sent, cfg: m.cfg,
		names: g.names, tokens: tokens,
	}), 0, nil
}

func (a *multiAcquirer) validReply(res []int64) bool {
	switch {
	case len(res) == 0:
		return false
	case res[0] == 1:
		return len(res) == len(a.g.names)+1
	case res[0] == 0:
		return len(res) == 3 && res[2] >= 1 && int(res[2]) <= len(a.g.names)
	}
	return false
}

func (a *multiAcquirer) rewatch() (string, bool) {
	if a.busy == a.watch {
		return "", false
	}
	a.watch = a.busy
	return a.g.channels[a.watch], true
}

func (a *multiAcquirer) leave(ctx context.Context, waiterID string) { a.abandon(ctx, "", waiterID) }

// abandon gives up an attempt whose outcome is unknown (owner), a waiter's
// registration (waiterID), or both; see multi_abandon.lua.
func (a *multiAcquirer) abandon(ctx context.Context, owner, waiterID string) {
	m, g := a.m, a.g
	ttl, _ := m.cfg.holdTTL()
	keys := append(g.keys[:len(g.keys):len(g.keys)], g.first.tombstone(owner))
	m.c.abandon(ctx, g.name, multiKind.abandon, keys, m.cfg.logger, owner, ttl.Milliseconds(), waiterID, a.watch+1)
}
