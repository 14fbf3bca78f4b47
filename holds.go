package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/internal/inspect"
	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
)

// holdLock is what ReentrantMutex and RWMutex share: holds counted per owner
// and mode, each Lease's expiring on its own on the server's clock.
// internal/scripts/rw_lib.lua describes the state in Redis.
type holdLock struct {
	handle
	owner string // WithOwner's id; "" when the context says who the owner is (see ownerFor)

	heldKey   any          // the context key of a hold of this lock (see ownerFor), boxed once
	writeKind observe.Kind // what observers are told the write side is: KindWrite or KindReentrant

	inspectKeys []string // the KEYS of Inspect; the others are in write and read

	write, read *acquireSpec
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

func (c *Client) newHoldLock(name string, writeKind observe.Kind, opts []Option) holdLock {
	// A write hold stores for Describe the type that took it: a
	// ReentrantMutex's mark, or nothing for an RWMutex.
	scope, takenBy := forRWMutex, any("")
	if writeKind == observe.KindReentrant {
		scope, takenBy = forReentrant, reentrantMark
	}
	h := holdLock{handle: c.newHandle(name, opts, scope), writeKind: writeKind}
	h.owner, h.heldKey = h.cfg.owner, heldKey(h.keys.lock)
	var more [][]string
	h.write, more = h.layOut(acquireSpec{op: "lock", script: scripts.RWAcquire, takenBy: takenBy, lease: leaseSpec{kind: rwKind}},
		nil, scripts.RWLayout.Before("WWAIT"), scripts.LayoutOf(scripts.RWInspect), scripts.RWLayout.Only("WCHAN"), scripts.RWLayout.Only("RCHAN"))
	if h.err != nil {
		return h
	}
	h.inspectKeys = more[0]
	h.write.channels, h.write.lease.rules.heldKey = more[1], h.heldKey
	// Reads send what writes send; only the waiters' channel differs.
	read := *h.write
	read.op, read.channels, read.takenBy = "read lock", more[2], ""
	h.read = &read
	return h
}

// Owner returns the owner id given to [WithOwner], or "" when there was
// none: then the context of each call says who the owner is.
func (h *holdLock) Owner() string { return h.owner }

// acquire is TryLock (try) or Lock, in mode.
func (h *holdLock) acquire(ctx context.Context, mode byte, try bool) (*Lease, error) {
	kind, spec := h.writeKind, h.write
	if mode == modeRead {
		kind, spec = observe.KindRead, h.read
	}
	return h.handle.acquire(ctx, kind, try, func(ctx context.Context) *call {
		owner := h.ownerFor(ctx)
		a := &holdCall{mode: mode, ownerID: owner, newOwner: owner == ""}
		return a.begin(&h.handle, spec, a)
	})
}

// holdCall is one TryLock or Lock call of a holdLock in one mode.
type holdCall struct {
	call
	mode     byte
	ownerID  string // who the call acquires for (see holdLock.ownerFor)
	newOwner bool   // an owner of its own: each start draws its owner id too
}

// fresh draws a new hold id and tombstone. The member is mode, hold id,
// owner: the hold id keeps it secret and each Lease's own.
func (a *holdCall) fresh() {
	holdID := newOwnerToken()
	if a.newOwner {
		a.ownerID = newOwnerToken()
	}
	a.owner = string(a.mode) + holdID + a.ownerID
	a.tombstone = a.h.keys.tombstone(holdID)
}

func (a *holdCall) request(waiterID string, _ any) ([]any, string) {
	return command(&a.call, waiterID, scripts.RWAcquireArgs{Acquire: a.shared(waiterID), Info: a.spec.info, TakenBy: a.spec.takenBy}), waiterID
}

// reentrantMark is the mark's value in Redis, whatever the Go names.
const reentrantMark = "ReentrantMutex"

func (a *holdCall) entry(waiterID string) string { return waiterID }

func (a *holdCall) refused(res []int64, _ string) error {
	if res[0] == -2 { // the script unregistered the waiter too
		return fmt.Errorf("%w: %q", ErrUpgrade, a.h.name)
	}
	return nil
}

// parseHoldState reads rw_state's reply (rw_lib.lua): ten numbers, then
// five fields per holder. reentrant: a ReentrantMutex took the writer's
// latest hold (see newHoldLock).
func parseHoldState(reply []any) (s RWState, reentrant bool, err error) {
	r, err := fcall.Int64s(reply, 10)
	if err != nil || (len(reply)-10)%5 != 0 {
		return RWState{}, false, fcall.ErrUnexpectedReply
	}
	var holders []admin.Holder
	for i := 10; i < len(reply); i += 5 {
		owner, _ := reply[i].(string)
		mode, _ := reply[i+1].(string)
		holds, _ := reply[i+2].(int64)
		info, _ := reply[i+3].(string)
		holders = append(holders, admin.Holder{Owner: admin.OwnerHash(owner), Write: mode == "w", Holds: int(holds), Info: inspect.HolderInfo(info)})
		if taken, _ := reply[i+4].(string); mode == "w" {
			reentrant = taken == reentrantMark
		}
	}
	return RWState{
		Holders: holders, WriteHolds: int(r[0]), ReadHolds: int(r[1]), Readers: int(r[2]),
		WriterIsOwner: r[3] == 1, OwnerReadHolds: int(r[4]), TTL: time.Duration(r[5]) * time.Millisecond,
		WritersWaiting: int(r[6]), ReadersWaiting: int(r[7]), WriteToken: uint64(r[8]), LastToken: uint64(r[9]),
	}, reentrant, nil
}
