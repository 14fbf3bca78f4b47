package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/fcall"
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
// that started at start.
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
// confirmed in time. A majority that refused loses the lease.
func (h *redlockHold) extend(ctx context.Context, ttl time.Duration, extending time.Time) (loss, err error) {
	l, m := h.lease, h.m
	args := scripts.ExtendArgs{Owner: h.owner, TTL: ttl.Milliseconds()}
	if !extending.IsZero() {
		args.Shorten = shortens
		m.r.ttlInUse(ttl)
		l.inDoubt(extending, ttl)
	}
	start := l.clock.Now()
	_, errs := onNodes(ctx, m.r.nodes, m.nodeTimeout, runOn(scripts.MutexExtend, m.keys.callKeys(redlockExtendLayout), args))
	if countErrs(errs, nil) >= m.r.quorum && m.drift(ttl)+l.clock.Since(start) < ttl {
		return nil, nil
	}
	return m.holdError("extend", errs)
}

// holdError is the error of an extension or release that no majority
// confirmed in time. Where a majority refused, the lease is lost; else
// it matches ErrUnavailable, as the silent nodes may hold it.
func (m *RedlockMutex) holdError(op string, errs []error) (loss, err error) {
	qerr := m.quorumError(op, errs)
	if countErrs(errs, errNotHeldThere) > len(m.r.nodes)-m.r.quorum {
		qerr.outcome = ErrNotHeld
		return errRenewalRefused, qerr
	}
	return nil, qerr
}

// quorumError is op's error from errs, matching ErrUnavailable unless its
// caller says otherwise; a timeout while dials failed says why.
func (m *RedlockMutex) quorumError(op string, errs []error) *QuorumError {
	granted := countErrs(errs, nil)
	qerr := &QuorumError{Op: op, Name: m.name, Quorum: m.r.quorum, Granted: granted,
		Late: granted >= m.r.quorum, outcome: ErrUnavailable}
	for i, err := range errs {
		if err == nil {
			continue
		}
		n := m.r.nodes[i]
		if dialErr := n.dials.Failure(time.Time{}); dialErr != nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (connecting failed: %w)", err, dialErr)
		}
		if fcall.IsPermission(err) && !errors.Is(err, ErrPermission) { // a release or renewal refused there
			err = fmt.Errorf("%w: %w", ErrPermission, err)
		}
		qerr.Nodes = append(qerr.Nodes, &NodeError{Node: n.index, Addr: n.addr, Err: err})
	}
	return qerr
}

// errNotHeldThere is a node's answer that the hold is not there; not
// ErrNotHeld, which a QuorumError matches only when a majority says so.
var errNotHeldThere = errors.New("not held there: expired or taken")

// nodeCall is one node's part of an operation, for onNodes.
type nodeCall = func(context.Context, *redlockNode) (struct{}, error)

// runOn runs on a node a script answering 1 done, 0 errNotHeldThere.
func runOn[A scripts.Args](script *redis.Script, keys []string, args A) nodeCall {
	return func(ctx context.Context, n *redlockNode) (struct{}, error) {
		ok, err := fcall.Run(ctx, &n.fns, n.rdb, script, keys, args).Int64()
		if err == nil && ok != 1 {
			err = errNotHeldThere
		}
		return struct{}{}, err
	}
}

// ttl is the validity left: the time to the deadline.
func (h *redlockHold) ttl(context.Context) (time.Duration, error) {
	return h.lease.clock.Until(h.lease.Deadline()), nil
}

// release releases on every node, whatever ctx (see giveBack), and
// succeeds where a majority let go. A lease its call does not return is
// abandoned, leaving the call's tombstone; an Unlock writes none, as a
// Redlock cannot tell an attempt sent twice (a known gap, docs/SAFETY.md).
func (h *redlockHold) release(ctx context.Context, rule voidRule) (loss, err error) {
	m := h.m
	give := runOn(scripts.MutexRelease, m.keys.callKeys(redlockReleaseLayout), // safe to resend
		scripts.ReleaseArgs{Owner: h.owner, Publish: "PUBLISH"})
	warning := "dlock: could not release a Redlock lease on a node; it expires with its TTL"
	if rule == voidAlways {
		give, warning = m.abandonOn(h.owner), "dlock: could not give back a Redlock lease its call did not return; it expires with its TTL"
	}
	errs := m.giveBack(ctx, nil, give, warning)
	if countErrs(errs, nil) < m.r.quorum {
		loss, err := m.holdError("unlock", errs)
		if loss == nil {
			loss = errUnlockIncomplete
		}
		return fmt.Errorf("%w: %w", loss, err), err
	}
	return nil, nil
}

func (h *redlockHold) renewAt(at time.Time) {
	if at.IsZero() {
		h.timer.Stop()
	} else if !h.lease.releasing() {
		h.timer.Reset(h.lease.clock.Until(at))
	}
}

func (h *redlockHold) addTokens(tokens map[string]uint64) { tokens[h.lease.name] = h.lease.token }
