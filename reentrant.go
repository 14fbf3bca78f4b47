package dlock

import (
	"context"
	"time"
)

// ReentrantMutex is an exclusive lock that its owner may take again while
// holding it. Each acquisition is a hold with its own [Lease]; the lock is
// free once every hold is released or has expired.
//
// The owner is the call chain, told by the context, never the handle: a
// handle may be shared between goroutines, as a [sync.Mutex] is, and each
// Lock whose context carries no hold of the lock is an owner of its own,
// which waits while anyone else holds it. A Lock whose context carries a
// live hold of this lock (one made by [Lease.Context], or derived from one)
// re-enters it, through any handle of the lock (its name and prefix, in any
// Client of the same Redis: the same go-redis client, or one of the same
// addresses and database; the same name on another Redis is another lock):
//
//	lease, err := m.Lock(ctx)
//	…
//	defer lease.Unlock(ctx)
//	ctx = lease.Context(ctx) // carries the hold: callees that Lock m with it re-enter
//
// So goroutines started with such a context share the hold, as work done
// under the lock should; a context whose lease has ended (released or lost)
// carries no hold. [WithOwner] instead makes every Lock through the handle
// the given owner, whatever its context: for holds shared across processes.
//
// A re-entry returns a new lease with the same fencing token, counts one
// more hold, and never shortens the time the other holds have left: each
// hold expires on its own, on Redis's clock. Each lease's Unlock takes away
// its own hold only, in any order; when the last goes, the next waiter is
// woken. A lease's context ends with that lease, and so does every context
// derived from it, even while other holds keep the lock: unlock the inner
// holds first (as defer does) to keep their contexts alive.
//
// A ReentrantMutex is the write side of the [RWMutex] of the same name.
type ReentrantMutex struct{ holdLock }

// ReentrantMutex returns the reentrant lock called name. Options override
// the Client's defaults. Nothing is sent to Redis; a bad name or option is returned by the
// first call that would, matching [ErrInvalid].
func (c *Client) ReentrantMutex(name string, opts ...Option) *ReentrantMutex {
	return &ReentrantMutex{holdLock: c.newHoldLock(name, KindReentrant, opts)}
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

// ReentrantState is a ReentrantMutex as [ReentrantMutex.Inspect] found it.
type ReentrantState struct {
	Held        bool          // some owner holds the lock
	HeldByOwner bool          // the holder is the owner the call acts as: ctx's hold's, or WithOwner's
	Count       int           // the holder's hold count; 0 when not held
	TTL         time.Duration // until the last hold expires unless renewed; 0 when not held
	Token       uint64        // the fencing token the holds share; 0 when not held
	Waiting     int           // Locks registered to be woken when it is free
}

// Inspect reports who holds the lock, how often, and for how long yet. It
// tells whether the holder is the owner a Lock with ctx would act as.
func (m *ReentrantMutex) Inspect(ctx context.Context) (ReentrantState, error) {
	s, err := m.inspect(ctx)
	if err != nil {
		return ReentrantState{}, err
	}
	return ReentrantState{
		Held: s.writeHolds > 0, HeldByOwner: s.writerIsOwner, Count: s.writeHolds,
		TTL: s.ttl, Token: s.writeToken, Waiting: s.writersWaiting,
	}, nil
}
