package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/internal/scripts"
)

// leaseKind is a lock type's scripts that renew, release, inspect and give
// up one hold; those of one operation take the same ARGV in every kind:
// scripts.ExtendArgs, ReleaseArgs or MultiReleaseArgs, AbandonArgs, OwnerArgs.
type leaseKind struct {
	extend  *redis.Script // 1, or a refusal's code (see refusal)
	release *redis.Script // 1 or 0; its last KEYS are its mark (releaseMark) and, giving up, the call's tombstone
	ttl     *redis.Script // the milliseconds left, or -3 when not held
	abandon *redis.Script // 1 or 0
}

// leaseSpec is what a lock type knows about a hold it has just been granted.
type leaseSpec struct {
	name    string
	kind    *leaseKind
	keys    []string // KEYS of extend and TTL; the first names the release mark (releaseMark)
	relKeys []any    // release's KEYS before its last ones, boxed (handle.boxed)
	owner   string
	token   uint64
	sent    time.Time // when the acquire that granted it was sent
	cfg     settings
	rules   leaseRules

	tombstone string        // the call's (keys.tombstone)
	validity  time.Duration // a hand-over's, if shorter than the TTL (hand_next.lua); 0: the TTL
	names     []string      // a MultiLock group's locks
	group     *groupTokens  // and their tokens, once granted
}

// clientHold is a hold in a Client's Redis, of one lock or of a MultiLock
// group in one slot, taken by one script with one owner token. The
// Client's renewer renews it with the others due on its node.
type clientHold struct {
	lease     *Lease
	c         *Client
	kind      *leaseKind
	keys      []string // KEYS of the kind's extend and TTL scripts
	relKeys   []any    // the handle's, shared (leaseSpec.relKeys)
	tombstone string
	group     *groupTokens
	owner     string     // secret: never logged, never in an error
	ack       replicaAck // what its extensions wait for: the deadline moves only with what replicas have
	noInfo    bool       // taken without holder info (WithHolderInfo): its release has none to remove

	// maybeCopied: an attempt of the call may have been sent twice
	// (Client.resendAfter): its release writes the call's tombstone.
	maybeCopied bool // set before the caller has the lease

	nextRenew time.Time // the renewer's, under its lock
	heapIndex int
}

// groupTokens are a MultiLock group's locks and the fencing token of each.
type groupTokens struct {
	names  []string
	tokens []uint64
}

// clientLease is a Lease with its clientHold, made in one allocation.
type clientLease struct {
	Lease
	clientHold
}

// startLease makes the lease of a granted hold and, unless it has a fixed
// lease time, hands it to the renewer.
func (c *Client) startLease(spec leaseSpec) *Lease {
	ttl, autoRenew := spec.cfg.holdTTL()
	validity := ttl
	if spec.validity > 0 {
		validity = min(spec.validity, ttl)
	}
	cl := &clientLease{
		Lease: Lease{name: spec.name, token: spec.token, rules: spec.rules, ttl: ttl, clock: c.clock, state: leaseHeld},
		clientHold: clientHold{c: c, kind: spec.kind, keys: spec.keys, relKeys: spec.relKeys, tombstone: spec.tombstone,
			group: spec.group, owner: spec.owner, ack: spec.cfg.ack, noInfo: spec.cfg.holderInfo == "", heapIndex: -1},
	}
	l, h := &cl.Lease, &cl.clientHold
	l.hold, h.lease = h, l
	l.setDeadline(spec.sent, validity)
	now := l.clock.Now()
	left := l.leftAt(now) // by both clocks: a reply read after a suspension has a wall clock that ran on
	if left < validity/3 || left < now.Sub(spec.sent) || (validity < ttl && !autoRenew) {
		// A slow link, a cold dial or a suspension ate into the grant. keep
		// confirms it, so none is handed over lost, overdue for renewal or
		// with less left than it took to arrive. keep extends a short fixed
		// one.
		l.state = leaseUnconfirmed
		return l
	}
	l.start(spec.sent, validity)
	return l
}

// noteCopies sets clientHold.maybeCopied (a Client's calls make only its leases).
func (l *Lease) noteCopies(maybeCopied bool) { l.hold.(*clientHold).maybeCopied = maybeCopied }

// infoArg tells a Mutex's or FairMutex's extend and release whether the
// hold stored holder info: "0" spares them reading it.
func (h *clientHold) infoArg() any {
	if h.noInfo {
		return "0"
	}
	return "1"
}

func (h *clientHold) extend(ctx context.Context, ttl time.Duration, extending time.Time) (loss, err error) {
	l := h.lease
	args := scripts.ExtendArgs{Owner: h.owner, TTL: ttl.Milliseconds(), Shorten: lengthens, Info: h.infoArg()}
	if !extending.IsZero() {
		args.Shorten = shortens
		l.inDoubt(extending, ttl)
	}
	calls := []fcall.Call{{Script: h.kind.extend, Argv: fcall.Argv(h.kind.extend, h.keys, args)}}
	acks := h.c.sendAcknowledged(ctx, h.ack, calls) // nil without WAIT
	n, err := calls[0].Cmd.Int64()
	switch {
	case err != nil:
		h.c.rights.refused(err)
		return nil, redisError("extend", l.name, err)
	case n != 1:
		return refusal(n), fmt.Errorf("%w: extend of %q refused: the lock expired or was taken", ErrNotHeld, l.name)
	case acks != nil && acks[0] != nil: // applied on the master, which may fail over to a replica without it
		return nil, fmt.Errorf("dlock: extend %q: %w", l.name, acks[0])
	}
	return nil, nil
}

func (h *clientHold) ttl(ctx context.Context) (time.Duration, error) {
	ms, err := fcall.Run(ctx, &h.c.fns, h.c.rdb, h.kind.ttl, h.keys, scripts.OwnerArgs{Owner: h.owner}).Int64()
	if err != nil {
		return 0, redisError("ttl", h.lease.name, err)
	}
	if ms == -3 {
		h.lease.refused()
		return 0, fmt.Errorf("%w: %q expired or was taken", ErrNotHeld, h.lease.name)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func (h *clientHold) release(ctx context.Context, rule voidRule) (loss, err error) {
	l := h.lease
	// Whatever ctx, within releaseMarkLife (CleanupTimeout): the release's
	// mark outlives every copy of it whose reply this Unlock could read.
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	// Named now, not kept from the grant, to keep held leases small.
	last := append(make([]string, 0, 2), releaseMark(h.keys[0], h.owner)) // room for a tombstone
	void := rule == voidAlways || (rule == voidIfCopied && h.maybeCopied)
	if void && h.tombstone != "" {
		last = append(last, h.tombstone)
	}
	// Without a tombstone, the hold's tokens tell a hold a late copy of its
	// grant took anew (minted_anew in common.lua).
	publish, err := h.c.publishCommand(ctx)
	var released int64 // 1 when the script let go, else 0
	if err == nil {
		argv := fcall.CommandOn(h.kind.release, h.relKeys, last, 0)
		if h.group == nil {
			argv = scripts.ReleaseArgs{Owner: h.owner, Publish: publish, Token: l.token, Info: h.infoArg()}.Append(argv)
		} else {
			argv = scripts.MultiReleaseArgs{Owner: h.owner, Publish: publish, Tokens: h.group.tokens}.Append(argv)
		}
		released, err = h.c.flights.Send(ctx, h.kind.release, argv).Int64()
	}
	h.c.rights.refused(err)
	if isPublishRefused(err) && h.group == nil {
		// A lock's release publishes after its writes: only the wake-up was
		// refused. (A MultiLock's publishes part by part: not so.)
		return nil, fmt.Errorf("%w: %q released, but its waiters could not be told (grant the lock's channels): %w", ErrPermission, l.name, err)
	}
	if err != nil {
		// Whether Redis let go is unknown; it does within the TTL at the latest.
		return errUnlockIncomplete, redisError("unlock", l.name, err)
	}
	if released != 1 {
		return errRenewalRefused, fmt.Errorf("%w: %q expired or was taken before unlock", ErrNotHeld, l.name)
	}
	return nil, nil
}

func (h *clientHold) renewAt(at time.Time) {
	if at.IsZero() {
		h.c.renewer.remove(h)
		return
	}
	h.c.renewer.schedule(h, at)
}

func (h *clientHold) addTokens(tokens map[string]uint64) {
	if h.group == nil {
		tokens[h.lease.name] = h.lease.token
		return
	}
	for i, name := range h.group.names {
		tokens[name] = h.group.tokens[i]
	}
}
