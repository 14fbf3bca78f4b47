package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/scripts"
)

// leaseKind is what differs between lock types: the scripts that renew,
// release, inspect and give up one hold. Every kind's scripts of one
// operation take the same ARGV (scripts.ExtendArgs, ReleaseArgs,
// AbandonArgs, OwnerArgs; a MultiLock's release MultiReleaseArgs). Extend,
// release and abandon return 1 or 0; ttl returns milliseconds left, or -3
// when not held. A release's mark is its last KEY (see releaseMark), then,
// from a giving-up release, the call's tombstone.
type leaseKind struct {
	extend  *redis.Script
	release *redis.Script
	ttl     *redis.Script
	abandon *redis.Script
}

// leaseSpec is what a lock type knows about a hold it has just been granted.
type leaseSpec struct {
	name    string
	kind    *leaseKind
	keys    []string // KEYS of extend and TTL
	relKeys []any    // release's KEYS up to its last keys (the mark, a tombstone), boxed by the type (see handle.boxed)
	mark    string   // the lock key the release mark is named after (see releaseMark)
	owner   string
	token   uint64
	sent    time.Time // when the acquire that granted it was sent
	cfg     settings
	rules   leaseRules

	// tombstone is the call's (see keys.tombstone): a release that gives
	// the call up writes it.
	tombstone string

	// validity is how long the hold was granted for, when a release handed
	// it over for less than the TTL (see hand_next.lua); 0 means the TTL.
	validity time.Duration

	names  []string // a MultiLock group's locks, and their tokens
	tokens []uint64
}

// clientHold is a hold in the Redis of a Client, of one lock or of a
// MultiLock group in one slot, taken by one script with one owner token.
// The Client's renewer renews it, in a batch with the others due on its
// node.
type clientHold struct {
	lease     *Lease
	c         *Client
	kind      *leaseKind
	keys      []string // KEYS of the kind's extend and TTL scripts
	relKeys   []any    // its release's KEYS up to its last keys, the handle's, shared
	mark      string   // the lock key its release's mark is named after (see releaseMark)
	tombstone string   // of the call the lease was granted to (see keys.tombstone), written by a release that gives it up
	group     *groupTokens
	owner     string     // secret: never logged, never in an error
	ack       replicaAck // what its extensions wait for: the deadline moves only with what replicas have
	noInfo    bool       // taken without holder info (WithHolderInfo): its release has none to remove

	// maybeCopied: an attempt of the call took long enough for the Redis
	// client to have sent it twice (see Client.resendAfter), so a copy may
	// still be on its way: the release writes the call's tombstone. Set
	// before the lease is handed to the caller (see noteCopies).
	maybeCopied bool

	// Owned by the Client's renewer, under its lock.
	nextRenew time.Time
	heapIndex int
}

// groupTokens are the locks of a MultiLock group held by one lease, and the
// fencing token of each.
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
		clientHold: clientHold{c: c, kind: spec.kind, keys: spec.keys, relKeys: spec.relKeys, mark: spec.mark, tombstone: spec.tombstone,
			owner: spec.owner, ack: spec.cfg.ack, noInfo: spec.cfg.holderInfo == "", heapIndex: -1},
	}
	l, h := &cl.Lease, &cl.clientHold
	l.hold, h.lease = h, l
	l.setDeadline(spec.sent, validity)
	if spec.names != nil {
		h.group = &groupTokens{names: spec.names, tokens: spec.tokens}
	}
	now := l.clock.Now()
	left := l.leftAt(now) // by both clocks: a reply read after a suspension has a wall clock that ran on
	if left < validity/3 || left < now.Sub(spec.sent) || (validity < ttl && !autoRenew) {
		// A slow link, a cold dial or a suspension ate into the grant:
		// keep confirms it first, so no lease is handed over lost, overdue
		// for renewal, or with less left than its grant took to arrive. A
		// fixed lease granted less than its lease time is extended to it.
		l.state = leaseUnconfirmed
		return l
	}
	l.start(spec.sent, validity)
	return l
}

// noteCopies notes whether an attempt of the call l was granted to may
// have been sent twice (see clientHold.maybeCopied). A Client's calls make
// only Client leases.
func (l *Lease) noteCopies(maybeCopied bool) { l.hold.(*clientHold).maybeCopied = maybeCopied }

// infoArg tells a Mutex's or FairMutex's extend and release whether the
// hold stored holder info: "0" spares them reading it. The other types'
// scripts take none. Boxed once: a release allocates nothing for it.
func (h *clientHold) infoArg() any {
	if h.noInfo {
		return boxedNoInfo
	}
	return boxedInfo
}

var boxedNoInfo, boxedInfo any = "0", "1"

func (h *clientHold) extend(ctx context.Context, ttl time.Duration, extending time.Time) (loss, err error) {
	l := h.lease
	args := scripts.ExtendArgs{Owner: h.owner, TTL: ttl.Milliseconds(), Shorten: lengthens, Info: h.infoArg()}
	if !extending.IsZero() {
		args.Shorten = shortens
		l.inDoubt(extending, ttl)
	}
	calls := []scriptCall{{script: h.kind.extend, argv: scriptArgv(h.kind.extend, h.keys, args)}}
	var ackErr error
	if acks := h.sendExtensions(ctx, h.c.rdb, calls); acks != nil {
		ackErr = acks[0]
	}
	n, err := calls[0].cmd.Int64()
	switch {
	case err != nil:
		h.c.rights.refused(err)
		return nil, redisError("extend", l.name, err)
	case n != 1:
		return refusal(n), fmt.Errorf("%w: extend of %q refused: the lock expired or was taken", ErrNotHeld, l.name)
	case ackErr != nil: // applied on the master, which may fail over to a replica without it
		return nil, fmt.Errorf("dlock: extend %q: %w", l.name, ackErr)
	}
	return nil, nil
}

// sendExtensions sends calls, extensions of holds on one master, to rdb;
// with [WithReplicaAck], through the master and with WAIT after them (see
// replicaAck.send), and returns each call's shortfall of acknowledgements
// (nil without WithReplicaAck): a lease's deadline moves only with an
// extension its replicas have, or a failover to one of them would end the
// hold before the deadline its holder counts on. A call the master
// redirects (its slot moved, or is moving) goes again where it is sent,
// alone (see sendAcknowledged).
func (h *clientHold) sendExtensions(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall) []error {
	if h.ack.n == 0 {
		sendScripts(ctx, &h.c.fns, rdb, calls)
		return nil
	}
	acks := make([]error, len(calls))
	master, err := h.c.masterFor(ctx, h.keys[0])
	if err != nil {
		for i := range calls {
			calls[i].cmd = redis.NewCmd(ctx)
			calls[i].cmd.SetErr(err)
		}
		return acks
	}
	batch := h.ack.send(ctx, &h.c.fns, master, calls)
	for i, call := range calls {
		acks[i] = batch
		addr, ask, redirected := redirection(call.cmd.Err())
		if !redirected {
			continue
		}
		if next, err := h.c.clusterNode(ctx, addr, !ask); err == nil {
			calls[i].cmd, acks[i] = h.c.sendAcknowledged(ctx, h.ack, next, ask, call.script, call.argv)
		}
	}
	return acks
}

func (h *clientHold) ttl(ctx context.Context) (time.Duration, error) {
	l := h.lease
	ms, err := runScript(ctx, &h.c.fns, h.c.rdb, h.kind.ttl, h.keys, scripts.OwnerArgs{Owner: h.owner}).Int64()
	if err != nil {
		return 0, redisError("ttl", l.name, err)
	}
	if ms == -3 {
		l.refused()
		return 0, fmt.Errorf("%w: %q expired or was taken", ErrNotHeld, l.name)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func (h *clientHold) release(ctx context.Context, rule voidRule) (loss, err error) {
	l := h.lease
	// Bounded whatever ctx, so that the release's mark outlives every copy
	// of it whose reply this Unlock could read (see releaseMarkLife).
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, releaseMarkLife)
	defer cancel()
	// The mark is named at release, not kept from the grant: a held lease
	// costs a Client's memory for as long as it is held (see 10000Held).
	last := make([]string, 1, 2) // room for a tombstone
	last[0] = releaseMark(h.mark, h.owner)
	void := rule == voidAlways || (rule == voidIfCopied && h.maybeCopied)
	if void && h.tombstone != "" { // the tombstone is release's last KEY
		last = append(last, h.tombstone)
	}
	// The tombstone's lifetime is a place-holder when none is written; the
	// hold's tokens tell a hold a late copy of its grant took anew
	// (minted_anew in common.lua).
	publish, err := h.c.publishArgFor(ctx)
	ok := false
	if err == nil {
		argv := commandOn(h.kind.release, h.relKeys, last, 0)
		if h.group == nil {
			argv = scripts.ReleaseArgs{Owner: h.owner, Publish: publish, Token: l.token, Info: h.infoArg()}.Append(argv)
		} else {
			argv = scripts.MultiReleaseArgs{Owner: h.owner, Publish: publish, Tokens: h.group.tokens}.Append(argv)
		}
		ok, err = h.c.releaseWithin(ctx, h.kind.release, argv)
	}
	h.c.rights.refused(err)
	if isPublishRefused(err) && h.group == nil {
		// A lock's release publishes after its writes: the hold is released
		// (handed over), only the wake-up was refused. (A MultiLock's
		// publishes part by part, so its later parts may be held still.)
		return nil, fmt.Errorf("%w: %q released, but its waiters could not be told (grant the lock's channels): %w", ErrPermission, l.name, err)
	}
	if err != nil {
		// Whether Redis let go is unknown; it does within the TTL at the latest.
		return errUnlockIncomplete, redisError("unlock", l.name, err)
	}
	if !ok {
		return errRenewalRefused, fmt.Errorf("%w: %q expired or was taken before unlock", ErrNotHeld, l.name)
	}
	return nil, nil
}

func (h *clientHold) renewAt(at time.Time) {
	if at.IsZero() {
		h.c.renewer.remove(h)
		return
	}
	h.c.renewer.reschedule(h, at)
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
