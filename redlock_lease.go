package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockio/dlock/internal/scripts"
)

// redlockHold is a hold on a majority of a Redlock's nodes. It renews
// itself, on a timer of its own: a Redlock has no Client.
type redlockHold struct {
	lease *Lease
	m     *RedlockMutex
	owner string      // secret: never logged, never in an error
	timer *time.Timer // the next renewal, of an auto-renewed lease
}

// newLease makes the lease of a hold a majority granted to an attempt
// that started at start: valid until start + TTL − TTL × drift − 2 ms.
func (m *RedlockMutex) newLease(owner string, token uint64, start time.Time, ttl time.Duration) *Lease {
	l := &Lease{name: m.name, token: token, rules: m.rules, ttl: ttl, clock: m.r.clock, state: leaseHeld}
	h := &redlockHold{lease: l, m: m, owner: owner}
	l.hold = h
	if m.rules.renew { // made before start sets it, so that no renewal runs before it is made
		h.timer = time.AfterFunc(ttl/3, l.renewNow)
	}
	l.setDeadline(start, ttl)
	l.start(start, ttl)
	return l
}

// extend extends the hold on every node; it counts when a majority
// confirmed within the validity the extension gives. A majority that
// refused (the hold expired there, or is another's) loses the lease.
func (h *redlockHold) extend(ctx context.Context, ttl time.Duration, extending time.Time) (loss, err error) {
	l, m := h.lease, h.m
	explicit := !extending.IsZero()
	if explicit {
		m.r.ttlInUse(ttl)
		l.inDoubt(extending, ttl)
	}
	start := l.clock.Now()
	_, errs := onNodes(ctx, m.r.nodes, m.nodeTimeout, func(ctx context.Context, n *redlockNode) (struct{}, error) {
		args := []any{h.owner, ttl.Milliseconds()}
		if explicit {
			args = append(args, shortens)
		}
		ok, err := runScript(ctx, &n.fns, n.rdb, scripts.MutexExtend, m.keys.callKeys(redlockExtendLayout), args...).Int64()
		return struct{}{}, heldOrNot(ok, err)
	})
	granted := succeeded(errs)
	if granted >= m.r.quorum && m.drift(ttl)+l.clock.Since(start) < ttl {
		return nil, nil
	}
	lost := m.r.majorityRefused(errs)
	err = &QuorumError{Op: "extend", Name: m.name, Quorum: m.r.quorum, Granted: granted,
		Late: granted >= m.r.quorum, Nodes: nodeErrors(m.r.nodes, errs), outcome: holdOutcome(lost)}
	if lost {
		return errRenewalRefused, err
	}
	return nil, err
}

// majorityRefused reports whether so many nodes answered that the hold is
// not there that no quorum can still have it.
func (r *Redlock) majorityRefused(errs []error) bool {
	refused := 0
	for _, err := range errs {
		if errors.Is(err, errNotHeldThere) {
			refused++
		}
	}
	return refused > len(r.nodes)-r.quorum
}

// holdOutcome is the sentinel a failed extension or release matches:
// ErrNotHeld when a majority refused, else ErrUnavailable, as for a lock on
// one server whose Redis did not answer: the nodes that did not confirm
// may hold it still.
func holdOutcome(majorityRefused bool) error {
	if majorityRefused {
		return ErrNotHeld
	}
	return ErrUnavailable
}

// errNotHeldThere is a node's answer that the hold is not there. It is not
// ErrNotHeld: a QuorumError, which wraps every node's error, matches
// ErrNotHeld only when a majority says so (see holdOutcome).
var errNotHeldThere = errors.New("not held there: expired or taken")

// heldOrNot reads a node's answer to a script that acts only on a hold of
// the owner's: 1 done, 0 not held there.
func heldOrNot(ok int64, err error) error {
	switch {
	case err != nil:
		return err
	case ok != 1:
		return errNotHeldThere
	}
	return nil
}

// ttl is the validity left: the time to the deadline.
func (h *redlockHold) ttl(context.Context) (time.Duration, error) {
	return h.lease.clock.Until(h.lease.Deadline()), nil
}

// release releases on every node, whatever ctx, and succeeds where a
// majority let go of a hold of this owner. It waits for each node for the
// node timeout; where a release failed, it is sent again in the
// background (see giveBack), which the outcome does not wait for. A
// lease its call does not return (see giveUp) is given up as a failed
// attempt is (see abandon): the release leaves the call's tombstone, so
// that a copy of the attempt still on its way takes nothing. An Unlock
// writes none: a Redlock never learns whether one of its attempts was sent
// twice (clientHold.maybeCopied is a Client's), so a late copy of the attempt
// that granted the lease, landing after its Unlock, takes that master
// again for its TTL (the known gap, docs/SAFETY.md: "A Redlock's release
// writes no tombstone").
func (h *redlockHold) release(ctx context.Context, rule voidRule) (loss, err error) {
	m := h.m
	give, warning := m.releaseOn(h.owner), "dlock: could not release a Redlock lease on a node; it expires with its TTL"
	if rule == voidAlways {
		give, warning = m.abandonOn(h.owner), "dlock: could not give back a Redlock lease its call did not return; it expires with its TTL"
	}
	errs := m.giveBack(ctx, m.r.nodes, nil, give, warning)
	if granted := succeeded(errs); granted < m.r.quorum {
		lost := m.r.majorityRefused(errs)
		err := &QuorumError{Op: "unlock", Name: m.name, Quorum: m.r.quorum, Granted: granted,
			Nodes: nodeErrors(m.r.nodes, errs), outcome: holdOutcome(lost)}
		cause := error(errUnlockIncomplete)
		if lost {
			cause = errRenewalRefused
		}
		return fmt.Errorf("%w: %w", cause, err), err
	}
	return nil, nil
}

// releaseOn is what releases owner's hold on a node (errNotHeldThere:
// owner holds nothing there). Sent twice, the second finds nothing.
func (m *RedlockMutex) releaseOn(owner string) func(context.Context, *redlockNode) error {
	keys := m.keys.callKeys(redlockReleaseLayout)
	return func(ctx context.Context, n *redlockNode) error {
		ok, err := runScript(ctx, &n.fns, n.rdb, scripts.MutexRelease, keys, owner, "PUBLISH").Int64()
		return heldOrNot(ok, err)
	}
}

func (h *redlockHold) renewAt(at time.Time) {
	l := h.lease
	switch {
	case at.IsZero():
		h.timer.Stop()
	case l.releasing():
	default:
		h.timer.Reset(l.clock.Until(at))
	}
}

func (h *redlockHold) addTokens(tokens map[string]uint64) { tokens[h.lease.name] = h.lease.token }
