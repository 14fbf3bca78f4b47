package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockio/dlock/internal/scripts"
)

// redlockHold is what a Redlock lease needs to renew and release its hold
// on the nodes.
type redlockHold struct {
	m     *RedlockMutex
	lease *Lease

	// extended tells renewEvery that an Extend was confirmed: the next
	// renewal is due a third of the new TTL from now.
	extended chan struct{}
}

// newLease makes the lease of a hold a majority granted to an attempt
// that started at start: valid until start + TTL − TTL × drift − 2 ms.
func (m *RedlockMutex) newLease(owner string, token uint64, start time.Time, ttl time.Duration) *Lease {
	_, autoRenew := m.cfg.holdTTL()
	l := &Lease{
		name: m.name, owner: owner, token: token, drift: m.cfg.drift, slack: redlockSlack,
		log: m.cfg.logger, ttl: ttl, heapIndex: -1, watched: autoRenew,
	}
	l.setDeadline(start, ttl)
	l.redlock = &redlockHold{m: m, lease: l, extended: make(chan struct{}, 1)}
	l.mu.Lock()
	l.timer = time.AfterFunc(l.nextCheck(time.Now()), l.checkDeadline)
	l.mu.Unlock()
	if autoRenew {
		go l.redlock.renewEvery(ttl / 3)
	}
	return l
}

// renewEvery extends the hold every interval (TTL/3) until the lease ends;
// sooner again after a round that did not reach a majority, until the
// deadline gives up on it. An Extend starts the count again from its TTL.
func (h *redlockHold) renewEvery(interval time.Duration) {
	l := h.lease
	timer := time.NewTimer(interval)
	defer timer.Stop()
	done := l.Done()
	for {
		select {
		case <-done:
			return
		case <-h.extended:
			timer.Reset(l.currentTTL() / 3)
			continue
		case <-timer.C:
		}
		if l.unlocking.Load() {
			return
		}
		ttl := l.currentTTL()
		due := l.Deadline()
		ctx, cancel := context.WithDeadline(context.Background(), due)
		err := h.extendOnce(ctx, ttl, false)
		cancel()
		l.redlockRenewed(due, err)
		next := ttl / 3
		if err != nil {
			l.log.Debug("dlock: Redlock renewal did not reach a majority, retrying", "lock", l.name, "err", err)
			next = max(time.Until(l.Deadline())/4, 5*time.Millisecond)
		}
		timer.Reset(next)
	}
}

// extend is Lease.Extend of a Redlock lease.
func (h *redlockHold) extend(ctx context.Context, l *Lease, ttl time.Duration) error {
	if err := l.heldLocally(); err != nil {
		return err
	}
	h.m.r.ttlInUse(ttl)
	if err := h.extendOnce(ctx, ttl, true); err != nil {
		return err
	}
	l.mu.Lock()
	l.ttl = ttl
	l.mu.Unlock()
	select { // the renewal due was planned for the former TTL
	case h.extended <- struct{}{}:
	default:
	}
	return nil
}

// extendOnce extends the hold on every node; it counts when a majority
// confirmed within the validity the extension gives. A majority that
// refused (the hold expired there, or is another's) loses the lease. Only
// Extend passes explicit: a renewal never shortens a node's hold, as a late
// one must not cut an Extend to a longer TTL short (see Lease.extendMu).
func (h *redlockHold) extendOnce(ctx context.Context, ttl time.Duration, explicit bool) error {
	l, m := h.lease, h.m
	if err := l.extendMu.Lock(ctx); err != nil { // nothing was sent
		return fmt.Errorf("dlock: redlock extend %q: %w", m.name, err)
	}
	defer l.extendMu.Unlock()
	start := time.Now()
	_, errs := onNodes(ctx, m.r.nodes, m.nodeTimeout, func(ctx context.Context, n *redlockNode) (struct{}, error) {
		args := []any{l.owner, ttl.Milliseconds()}
		if explicit {
			args = append(args, shortens)
		}
		ok, err := runScript(ctx, n.rdb, scripts.MutexExtend, []string{m.keys.lock}, args...).Int64()
		return struct{}{}, heldOrNot(ok, err)
	})
	refused := refusedBy(errs)
	granted := succeeded(errs)
	if granted >= m.r.quorum && m.drift(ttl)+time.Since(start) < ttl {
		return l.confirmed(start, ttl)
	}
	if refused > len(m.r.nodes)-m.r.quorum {
		l.refused()
	}
	return &QuorumError{Op: "extend", Name: m.name, Quorum: m.r.quorum, Granted: granted,
		Late: granted >= m.r.quorum, Nodes: nodeErrors(m.r.nodes, errs), outcome: ErrNotHeld}
}

// refusedBy counts the nodes that answered that the hold is not there.
func refusedBy(errs []error) int {
	refused := 0
	for _, err := range errs {
		if errors.Is(err, ErrNotHeld) {
			refused++
		}
	}
	return refused
}

// heldOrNot reads a node's answer to a script that acts only on a hold of
// the owner's: 1 done, 0 not held there.
func heldOrNot(ok int64, err error) error {
	switch {
	case err != nil:
		return err
	case ok != 1:
		return fmt.Errorf("%w: expired or taken", ErrNotHeld)
	}
	return nil
}

// validity is Lease.TTL of a Redlock lease: the time to its deadline.
func (h *redlockHold) validity() (time.Duration, error) {
	l := h.lease
	if err := l.heldLocally(); err != nil {
		return 0, err
	}
	return time.Until(l.Deadline()), nil
}

// unlock is Lease.Unlock of a Redlock lease (the caller holds unlockMu):
// it releases on every node, whatever ctx, and succeeds where a majority
// let go of a hold of this owner.
func (h *redlockHold) unlock(ctx context.Context, l *Lease) error {
	m := h.m
	ctx = context.WithoutCancel(ctx) // each node's call is bounded by onNodes
	keys := []string{m.keys.lock, m.keys.channel, m.keys.waiters, m.keys.fence}
	_, errs := onNodes(ctx, m.r.nodes, m.nodeTimeout, func(ctx context.Context, n *redlockNode) (struct{}, error) {
		ok, err := runScript(ctx, n.rdb, scripts.MutexRelease, keys, l.owner, "PUBLISH").Int64()
		return struct{}{}, heldOrNot(ok, err)
	})
	if granted := succeeded(errs); granted < m.r.quorum {
		err := &QuorumError{Op: "unlock", Name: m.name, Quorum: m.r.quorum, Granted: granted,
			Nodes: nodeErrors(m.r.nodes, errs), outcome: ErrNotHeld}
		cause := error(errUnlockIncomplete)
		if refusedBy(errs) > len(m.r.nodes)-m.r.quorum { // a majority no longer held it
			cause = errRenewalRefused
		}
		l.end(fmt.Errorf("%w: %w", cause, err))
		return err
	}
	l.end(nil)
	return nil
}
