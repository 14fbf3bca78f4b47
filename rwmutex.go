package dlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
)

// RWMutex is a distributed read-write lock: many readers or one writer.
// Unlike a [sync.RWMutex] it is reentrant, owned by the call chain as a
// [ReentrantMutex] is, and each acquisition is a hold with its own [Lease].
// A writer may read on after its write (downgrade); an owner holding only
// reads gets [ErrUpgrade]. Writers are preferred: once one waits, new
// readers wait too. Every hold mints a token above every earlier one.
type RWMutex struct{ holdLock }

// RWMutex returns the read-write lock called name, with options and bad
// input as [Client.Mutex]'s.
func (c *Client) RWMutex(name string, opts ...Option) *RWMutex {
	return &RWMutex{holdLock: c.newHoldLock(name, observe.KindWrite, opts)}
}

// Lock takes the write side, waiting for readers and any other writer to
// leave, until ctx ends or the wait set by [WithWait] runs out. It re-enters
// at once when ctx carries a write hold of the lock, and returns
// [ErrUpgrade] when ctx's owner holds only read locks.
func (rw *RWMutex) Lock(ctx context.Context) (*Lease, error) {
	return rw.acquire(ctx, modeWrite, false)
}

// TryLock makes one attempt at the write side and never waits; it returns
// [ErrNotAcquired] when another owner than ctx's reads or writes.
func (rw *RWMutex) TryLock(ctx context.Context) (*Lease, error) {
	return rw.acquire(ctx, modeWrite, true)
}

// RLock takes a read lock, waiting while another owner writes or a writer
// waits, until ctx ends or the wait set by [WithWait] runs out. When ctx
// carries a hold of the lock, read or write, it takes the read lock at once.
func (rw *RWMutex) RLock(ctx context.Context) (*Lease, error) {
	return rw.acquire(ctx, modeRead, false)
}

// TryRLock makes one attempt at a read lock and never waits; it returns
// [ErrNotAcquired] when another owner writes or, unless ctx carries a hold
// of the lock, a writer waits.
func (rw *RWMutex) TryRLock(ctx context.Context) (*Lease, error) {
	return rw.acquire(ctx, modeRead, true)
}

// ReentrantMutex is an exclusive lock its owner may take again while
// holding it: the write side of the [RWMutex] of the same name. Each
// acquisition is a hold with its own [Lease] and the same fencing token,
// released in any order. The owner is the call chain: a Lock whose context
// carries a live hold ([Lease.Context]) re-enters; [WithOwner] names one.
type ReentrantMutex struct{ holdLock }

// ReentrantMutex returns the reentrant lock called name, with options and
// bad input as [Client.Mutex]'s.
func (c *Client) ReentrantMutex(name string, opts ...Option) *ReentrantMutex {
	return &ReentrantMutex{holdLock: c.newHoldLock(name, observe.KindReentrant, opts)}
}

// TryLock makes one attempt and never waits: it takes the lock if it is free
// or ctx carries a hold of it (see [ReentrantMutex]), else returns
// [ErrNotAcquired].
func (m *ReentrantMutex) TryLock(ctx context.Context) (*Lease, error) {
	return m.acquire(ctx, modeWrite, true)
}

// Lock takes the lock, re-entering at once if ctx carries a hold of it (see
// [ReentrantMutex]), and otherwise waiting for it as [Mutex.Lock] does.
func (m *ReentrantMutex) Lock(ctx context.Context) (*Lease, error) {
	return m.acquire(ctx, modeWrite, false)
}

// RWState is an RWMutex or a ReentrantMutex (its write side) as Inspect
// found it.
type RWState struct {
	WriteHolds     int            // holds of the write side, all by one owner; 0: nobody writes
	WriterIsOwner  bool           // the writer is the owner the call acts as: ctx's hold's, or WithOwner's
	ReadHolds      int            // read holds of all owners
	Readers        int            // owners holding read locks
	OwnerReadHolds int            // the read holds of the owner the call acts as
	TTL            time.Duration  // until the last hold expires unless renewed; 0 when not held
	WritersWaiting int            // writers registered to be woken
	ReadersWaiting int            // readers registered to be woken
	WriteToken     uint64         // the writer's fencing token; 0: nobody writes
	LastToken      uint64         // the highest fencing token minted for the name
	Holders        []admin.Holder // who holds it, the writer first
}

// Inspect reports who holds the lock, how often, and who waits. The
// owner's fields are about the owner a Lock with ctx would act as.
func (h *holdLock) Inspect(ctx context.Context) (RWState, error) {
	if err := h.check(ctx); err != nil {
		return RWState{}, err
	}
	reply, err := fcall.Run(ctx, &h.c.fns, h.c.rdb, scripts.RWInspect, h.inspectKeys, scripts.OwnerArgs{Owner: h.ownerFor(ctx)}).Slice()
	if err == nil {
		var s RWState
		if s, _, err = parseHoldState(reply); err == nil {
			return s, nil
		}
	}
	return RWState{}, redisError("inspect", h.name, err)
}

// heldKey is the context key of a read-write lock's hold: the lock's key,
// which its handles alone find (ownerFor checks the Redis too).
type heldKey string

// ownerFor is the owner a call on h with ctx acts as: WithOwner's id; else
// that of the live hold of this lock, on this Redis, that ctx carries (an
// ended lease's context joins nothing); else "", a new owner.
func (h *holdLock) ownerFor(ctx context.Context) string {
	if h.owner != "" {
		return h.owner
	}
	held, ok := ctx.Value(h.heldKey).(*clientHold)
	sameRedis := ok && (held.c == h.c || h.c.redis != "" && held.c.redis == h.c.redis) // see redisIdentity
	if sameRedis && held.lease.heldLocally() == nil {
		return held.owner[1+scripts.OwnerTokenDigits:] // a member is mode, hold id, owner (holdCall.fresh)
	}
	return ""
}

// redisIdentity names the Redis rdb talks to; "" when that cannot be told.
func redisIdentity(rdb redis.UniversalClient) string {
	switch r := rdb.(type) {
	case *redis.Client:
		o := r.Options()
		if o.Addr == "" || o.Addr == "FailoverClient" {
			// A Sentinel client: its options do not name its master.
			return fmt.Sprintf("client %p", r)
		}
		return fmt.Sprintf("standalone %s %s db %d", o.Network, o.Addr, o.DB)
	case *redis.ClusterClient:
		return "cluster " + strings.Join(slices.Sorted(slices.Values(r.Options().Addrs)), " ")
	case *redis.Ring:
		o := r.Options()
		var shards []string
		for name, addr := range o.Addrs {
			shards = append(shards, name+"="+addr)
		}
		slices.Sort(shards)
		return fmt.Sprintf("ring %s db %d", strings.Join(shards, " "), o.DB)
	}
	return ""
}
