package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlockio/dlock/internal/scripts"
)

// holdLock is what ReentrantMutex and RWMutex share: holds counted per owner
// and mode, each hold (each Lease) expiring on its own on the server's
// clock. internal/scripts/rw_lib.lua describes the state in Redis.
type holdLock struct {
	c     *Client
	name  string
	owner string // WithOwner's id; "" when the context says who the owner is (reentry.go)
	cfg   settings
	keys  keys
	err   error // bad arguments, returned before any I/O

	// heldKey is the context key of a hold of this lock (see ownerFor),
	// boxed once so that looking it up allocates nothing.
	heldKey   any
	writeKind Kind // what observers are told the write side is: KindWrite or KindReentrant

	// KEYS of the scripts in rw_lib.lua's order, up to the fencing counter:
	// the same for every attempt and lease, so made once (scripts never
	// modify them). An attempt adds its tombstone.
	scriptKeys []string
}

const (
	modeWrite byte = 'w'
	modeRead  byte = 'r'
)

var rwKind = &leaseKind{
	extend:  scripts.RWExtend,
	release: scripts.RWRelease,
	ttl:     scripts.RWTTL,
	abandon: scripts.RWAbandon,
}

func (c *Client) newHoldLock(name string, writeKind Kind, opts []Option) holdLock {
	if c == nil {
		return holdLock{name: name, err: invalidf("nil dlock.Client")}
	}
	cfg := c.cfg.with(opts)
	k := keysFor(cfg.prefix, name)
	h := holdLock{c: c, name: name, owner: cfg.owner, cfg: cfg, keys: k, scriptKeys: rwScriptKeys(k), heldKey: heldKey(k.lock), writeKind: writeKind}
	if h.err = validateName(name); h.err == nil {
		h.err = cfg.validate()
	}
	return h
}

// rwScriptKeys are the KEYS of the read-write scripts (scripts.RWLayout),
// up to the fencing counter: a Mutex's keys and a read-write lock's own.
// Made once per handle, not per Mutex.
func rwScriptKeys(k keys) []string { return scripts.RWLayout.Keys(k.lock) }

// Positions in rwScriptKeys of the keys Go code names itself.
var (
	rwReadChannel = scripts.RWLayout.Index("RCHAN")
	rwReleaseKeys = rwReadChannel + 1 // the KEYS of release: up to the readers' channel
)

func (h *holdLock) check(ctx context.Context) error {
	if h.err != nil {
		return h.err
	}
	return h.c.usable(ctx)
}

// acquire is TryLock (try) or Lock, in mode.
func (h *holdLock) acquire(ctx context.Context, mode byte, try bool) (*Lease, error) {
	if err := h.check(ctx); err != nil {
		return nil, err
	}
	if o := h.cfg.observer; o != nil {
		kind := h.writeKind
		if mode == modeRead {
			kind = KindRead
		}
		return o.acquire(ctx, kind, h.name, try || h.cfg.triesOnce(), func(ctx context.Context) (*Lease, error) {
			return h.take(ctx, mode, try)
		})
	}
	return h.take(ctx, mode, try)
}

// take is acquire's work.
func (h *holdLock) take(ctx context.Context, mode byte, try bool) (*Lease, error) {
	owner := h.ownerFor(ctx)
	a := &holdAcquirer{h: h, mode: mode, owner: owner, newOwner: owner == ""}
	a.newCall()
	if try {
		return tryOnce(ctx, a)
	}
	channel := h.keys.channel
	if mode == modeRead {
		channel = h.scriptKeys[rwReadChannel]
	}
	return h.c.waitFor(ctx, h.cfg, channel, a)
}

// holdAcquirer acquires a holdLock in one mode: one TryLock or Lock call.
// All its attempts ask for the same hold, the call's, and share the call's
// tombstone: a copy of an earlier attempt arriving after a later one was
// granted finds that hold and reports it (it counts once, and registers
// nothing), and a copy of any of them arriving after the call gave up is
// refused.
type holdAcquirer struct {
	h     *holdLock
	mode  byte
	owner string // who the call acquires for (see holdLock.ownerFor)
	// newOwner: the call is an owner of its own (ownerFor found none), so
	// each start of the call draws its owner id with its hold id.
	newOwner bool
	// member is the call's hold: mode, hold id, owner. It is what the hold's
	// Lease shows to renew and release it: the random hold id makes it a
	// secret, and makes each call (each Lease) a hold of its own.
	member    string
	tombstone string // named after the hold id: see keys.tombstone
}

// newCall starts the call anew: a new hold id and a new tombstone, so that
// nothing an earlier start sent counts for it.
func (a *holdAcquirer) newCall() {
	var holdID string
	if a.newOwner {
		holdID, a.owner = newOwnerTokenPair()
	} else {
		holdID = newOwnerToken()
	}
	a.member = string(a.mode) + holdID + a.owner
	a.tombstone = a.h.keys.tombstone(holdID)
}

func (a *holdAcquirer) attempt(ctx context.Context, waiterID string) (*Lease, time.Duration, error) {
	h := a.h
	member := a.member
	keys := append(h.scriptKeys[:len(h.scriptKeys):len(h.scriptKeys)], a.tombstone)
	ttl, _ := h.cfg.holdTTL()
	sent := time.Now()
	cmd, unconfirmed := h.c.runAcquire(ctx, h.cfg, scripts.RWAcquire, keys,
		member, ttl.Milliseconds(), waiterID, waiterLease(h.cfg.waiterRefresh).Milliseconds(), h.cfg.holderInfo)
	res, err := cmd.Int64Slice()
	if err == nil && (len(res) != 2 || res[0] == -1) {
		err = errUnexpectedReply // -1 answers only an attempt already abandoned
	}
	if err != nil {
		if !isWrongType(err) {
			a.abandon(ctx, member, waiterID)
		}
		return nil, 0, redisError(a.op(), h.name, err)
	}
	switch {
	case res[0] == 1 && unconfirmed != nil:
		a.abandon(ctx, member, waiterID)
		return nil, 0, fmt.Errorf("dlock: %s %q: %w", a.op(), h.name, unconfirmed)
	case res[0] == 1:
		return h.c.startLease(leaseSpec{
			name: h.name, kind: rwKind, keys: h.scriptKeys[:2:2], relKeys: h.scriptKeys[:rwReleaseKeys:rwReleaseKeys], mark: h.keys.lock, tombstone: a.tombstone,
			owner: member, token: uint64(res[1]), sent: sent, cfg: h.cfg,
		}), 0, nil
	case res[0] == -2: // the script unregistered the waiter too
		return nil, 0, fmt.Errorf("%w: %q", ErrUpgrade, h.name)
	}
	return nil, time.Duration(res[1]) * time.Millisecond, nil
}

func (a *holdAcquirer) leave(ctx context.Context, waiterID string) {
	a.abandon(ctx, a.member, waiterID)
}

// abandon gives up the call (see holdLock.abandon). The tombstone keeps the
// call's attempts so far out, so a waiting Lock that goes on (see
// [ErrUnavailable]) goes on as a new call, with a new hold and tombstone.
func (a *holdAcquirer) abandon(ctx context.Context, member, waiterID string) {
	a.h.abandon(ctx, append(a.h.scriptKeys[:len(a.h.scriptKeys):len(a.h.scriptKeys)], a.tombstone), member, waiterID)
	a.newCall()
}

func (a *holdAcquirer) op() string {
	if a.mode == modeRead {
		return "read lock"
	}
	return "lock"
}

// abandon gives up a call (keys end with its tombstone): an attempt whose
// outcome is unknown (member), a waiter's registration (waiterID), or both;
// see rw_abandon.lua.
func (h *holdLock) abandon(ctx context.Context, keys []string, member, waiterID string) {
	h.c.abandon(ctx, h.name, rwKind.abandon, keys, h.cfg.logger, member, tombstoneLifeMillis, waiterID)
}

// holdState is what rw_inspect.lua reports.
type holdState struct {
	writeHolds, readHolds, readers int
	writerIsOwner                  bool
	ownReads                       int
	ttl                            time.Duration
	writersWaiting, readersWaiting int
	writeToken, lastToken          uint64
	holders                        []Holder
}

func (h *holdLock) inspect(ctx context.Context) (holdState, error) {
	if err := h.check(ctx); err != nil {
		return holdState{}, err
	}
	return inspectHolds(ctx, h.c, h.name, h.scriptKeys, h.ownerFor(ctx))
}

// inspectHolds runs rw_inspect.lua on a read-write lock's keys, as seen by
// owner.
func inspectHolds(ctx context.Context, c *Client, name string, keys []string, owner string) (holdState, error) {
	reply, err := scripts.RWInspect.Run(ctx, c.rdb, keys, owner).Slice()
	if err == nil {
		var s holdState
		if s, err = parseHoldState(reply); err == nil {
			return s, nil
		}
	}
	return holdState{}, redisError("inspect", name, err)
}

// parseHoldState reads rw_inspect.lua's reply: ten numbers, then owner,
// mode, holds and holder info of each holder.
func parseHoldState(reply []any) (holdState, error) {
	r, err := int64s(reply, 10)
	if err != nil || (len(reply)-10)%4 != 0 {
		return holdState{}, errUnexpectedReply
	}
	var holders []Holder
	for i := 10; i < len(reply); i += 4 {
		owner, _ := reply[i].(string)
		mode, _ := reply[i+1].(string)
		holds, _ := reply[i+2].(int64)
		info, _ := reply[i+3].(string)
		holders = append(holders, Holder{Owner: owner, Write: mode == "w", Holds: int(holds), Info: decodeHolderInfo(info)})
	}
	return holdState{
		holders:    holders,
		writeHolds: int(r[0]), readHolds: int(r[1]), readers: int(r[2]),
		writerIsOwner: r[3] == 1, ownReads: int(r[4]),
		ttl:            time.Duration(r[5]) * time.Millisecond,
		writersWaiting: int(r[6]), readersWaiting: int(r[7]),
		writeToken: uint64(r[8]), lastToken: uint64(r[9]),
	}, nil
}

// int64s reads the first n elements of a script's reply as integers.
func int64s(reply []any, n int) ([]int64, error) {
	if len(reply) < n {
		return nil, errUnexpectedReply
	}
	r := make([]int64, n)
	for i := range r {
		v, ok := reply[i].(int64)
		if !ok {
			return nil, errUnexpectedReply
		}
		r[i] = v
	}
	return r, nil
}

func (a *holdAcquirer) client() *Client { return a.h.c }
