package dlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
)

// MultiLock takes several exclusive locks, each the [Mutex] of its name:
// all or none. Its one [Lease], with a token per lock ([Lease.Tokens]),
// is lost as soon as any lock is. Taken in one global order, no two
// MultiLocks deadlock; a failed or cancelled one releases what it took. It
// waits on one lock at a time: unfair under constant contention.
type MultiLock struct {
	h      handle // its name is the names joined
	names  []string
	groups []*acquireSpec // the locks of each slot, taken together by one script
}

var multiKind = &leaseKind{
	extend:  scripts.MultiExtend,
	release: scripts.MultiRelease,
	ttl:     scripts.MultiTTL,
	abandon: scripts.MultiAbandon,
}

// MultiLock returns the locks of names, in any order, taken together; a
// name given twice counts once. Options and bad input (no names, an empty
// one…) are as [Client.Mutex]'s; [WithWait] bounds the whole wait.
func (c *Client) MultiLock(names []string, opts ...Option) *MultiLock {
	sorted := slices.Compact(slices.Sorted(slices.Values(names)))
	m := &MultiLock{h: handle{c: c, name: strings.Join(sorted, ",")}, names: sorted}
	if c == nil {
		m.h.err = invalidf("nil dlock.Client")
		return m
	}
	m.h.cfg = c.cfg.with(opts)
	if len(sorted) == 0 {
		m.h.err = invalidf("a MultiLock of no locks")
		return m
	}
	for _, name := range sorted {
		if m.h.err = validateName(name); m.h.err != nil {
			return m
		}
	}
	if m.h.err = m.h.cfg.validate(optionScope{"MultiLock", optEveryLock | optWaiterRefresh | optReplicaAck}); m.h.err == nil {
		for _, names := range c.groupBySlot(sorted) {
			m.groups = append(m.groups, m.h.group(names))
		}
	}
	return m
}

// group is the spec of the locks of names, taken by one script.
func (h *handle) group(names []string) *acquireSpec {
	n := len(names)
	keys, channels := make([]string, n*len(scripts.MultiPartLayout)), make([]string, n)
	for i, name := range names {
		k := keysFor(h.cfg.prefix, name)
		for j, key := range k.callKeys(scripts.MultiPartLayout) {
			keys[j*n+i] = key
		}
		channels[i] = k.channel
	}
	return h.boxed(acquireSpec{
		op: "lock", script: scripts.MultiAcquire, publishes: true, channels: channels,
		keys: [2][]string{keys}, abandonKeys: [2][]string{keys}, releaseKeys: keys,
		lease: leaseSpec{name: strings.Join(names, ","), kind: multiKind, keys: keys, names: names},
	})
}

// groupBySlot splits sorted lock names into the groups one script can take:
// one per cluster slot, in slot order, on a Redis Cluster; one per name on a
// Ring, whose shards are picked by name; all in one elsewhere.
func (c *Client) groupBySlot(names []string) [][]string {
	switch c.rdb.(type) {
	case *redis.ClusterClient:
		bySlot := map[int][]string{}
		for _, name := range names {
			bySlot[clusterSlot(name)] = append(bySlot[clusterSlot(name)], name)
		}
		var groups [][]string
		for _, slot := range slices.Sorted(maps.Keys(bySlot)) {
			groups = append(groups, bySlot[slot])
		}
		return groups
	case *redis.Ring:
		return slices.Collect(slices.Chunk(names, 1))
	}
	return [][]string{names}
}

// clusterSlot is the Redis Cluster hash slot of a lock's keys: CRC16
// (XMODEM) of their hash tag, the lock's name, modulo 16384.
func clusterSlot(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// Names returns the names of the locks, sorted, without repeats.
func (m *MultiLock) Names() []string { return slices.Clone(m.names) }

// TryLock makes one attempt at each group of locks and never waits. It
// returns [ErrNotAcquired], holding nothing, when any lock is held.
func (m *MultiLock) TryLock(ctx context.Context) (*Lease, error) {
	return m.acquire(ctx, true)
}

// Lock takes all the locks, waiting while any is held, until ctx ends or
// [WithWait]'s wait runs out: then its error matches both [ErrNotAcquired]
// and ctx's, holding nothing. The lease comes only once every lock is
// confirmed held with time left; else Lock releases all and starts over.
// With [WithLeaseTime], every lock's lease runs from about when Lock returns.
func (m *MultiLock) Lock(ctx context.Context) (*Lease, error) {
	return m.acquire(ctx, false)
}

func (m *MultiLock) acquire(ctx context.Context, try bool) (*Lease, error) {
	if err := m.h.check(ctx); err != nil {
		return nil, err
	}
	return acquireBy(ctx, m.h.cfg, observe.KindMulti, m.h.name, try, m.take)
}

// take takes all the groups in turn, or none, within one WithWait wait.
func (m *MultiLock) take(ctx context.Context, try bool) (*Lease, error) {
	for unavailable := 0; ; {
		held := make([]*Lease, 0, len(m.groups))
		token := newOwnerToken() // names the call's tombstones
		for _, g := range m.groups {
			l, err := acquireCall(ctx, m.call(g, token), try)
			if err != nil {
				m.rollBack(ctx, held)
				return nil, err
			}
			held = append(held, l)
		}
		if len(held) == 1 {
			return held[0], nil
		}
		err := confirmParts(ctx, held[:len(held)-1])
		if err == nil {
			return m.h.c.combineLeases(m.h.name, held), nil
		}
		m.rollBack(ctx, held)
		if !(errors.Is(err, errPartLost) || errors.Is(err, ErrUnavailable)) || try || contextDone(ctx) != nil {
			return nil, acquireError(ctx, err)
		}
		// A lock ran out while a later one was waited for, or Redis could
		// not confirm it (then after a pause): start over in the same order.
		if errors.Is(err, ErrUnavailable) {
			unavailable++
			if err := m.h.c.pause(ctx, unavailable, nil); err != nil {
				return nil, err
			}
		}
	}
}

var errPartLost = fmt.Errorf("%w: a lock ran out before the others were taken", ErrNotAcquired)

// confirmParts checks that the groups before the last still hold: a wait
// for a later one may outlast them. It extends a fixed lease to its lease
// time, so all run from when all are held. errPartLost if one is not.
func confirmParts(ctx context.Context, parts []*Lease) error {
	for _, p := range parts {
		var err error
		if p.rules.renew {
			err = p.heldLocally()
		} else {
			err = p.Extend(ctx, p.currentTTL())
		}
		if errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLeaseLost) { // ran out, or confirmed too late
			return fmt.Errorf("%w (%q)", errPartLost, p.name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// rollBack releases the groups taken, leaving their calls' tombstones
// (Lease.giveUp), whatever ctx; what it cannot release expires with the TTL.
func (m *MultiLock) rollBack(ctx context.Context, held []*Lease) {
	for _, l := range held {
		if err := l.giveUp(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
			m.h.cfg.logger.Warn("dlock: could not release part of a MultiLock that failed; it expires with its TTL",
				"lock", l.name, "err", err)
		}
	}
}

// multiCall takes a MultiLock's group, listening on the channel of the lock
// that kept it out last; until it starts anew, its tombstone is the call's.
type multiCall struct{ call }

func (m *MultiLock) call(g *acquireSpec, callToken string) *call {
	a := &multiCall{call{h: &m.h, spec: g, owner: newOwnerToken()}}
	a.tombstone = keys{lock: g.lease.keys[0]}.tombstone(callToken)
	a.v = a
	return &a.call
}

// fresh: a new owner token, and a tombstone of the group's own.
func (a *multiCall) fresh() {
	a.owner = newOwnerToken()
	a.tombstone = keys{lock: a.spec.lease.keys[0]}.tombstone(newOwnerToken())
}

func (a *multiCall) request(waiterID string, publish any) ([]any, string) {
	return command(&a.call, waiterID, scripts.MultiAcquireArgs{Acquire: a.shared(waiterID), Watch: a.watch + 1, Publish: publish}), waiterID
}

func (a *multiCall) entry(waiterID string) string { return waiterID }

func (a *multiCall) valid(res []int64) bool {
	if len(res) > 0 && res[0] == 1 {
		return len(res) == len(a.spec.lease.names)+1
	}
	return len(res) == 3 && res[0] == 0 && res[2] >= 1 && int(res[2]) <= len(a.spec.lease.names)
}

// refused notes the lock in the way, whose channel the wait listens on next.
func (a *multiCall) refused(res []int64, _ string) error {
	a.busy = int(res[2]) - 1
	return nil
}

func (a *multiCall) abandonArgs(entry string) scripts.AbandonArgs {
	return scripts.AbandonArgs{Waiter: entry, Also: a.watch + 1}
}
