package dlock

import (
	"context"
	"time"
)

// ReentrantMutex is an exclusive lock that its owner may take again while
// holding it. Each acquisition is a hold with its own [Lease], with the same
// fencing token; the lock is free once every hold is released or expired.
//
// The owner is the call chain, told by the context, never the handle: share
// a handle between goroutines as a [sync.Mutex], and each Lock whose context
// carries no hold of the lock is an owner of its own. A Lock whose context
// carries a live hold of this lock, on the same Redis, re-enters it:
//
//	lease, err := m.Lock(ctx)
//	…
//	defer lease.Unlock(ctx)
//	ctx = lease.Context(ctx) // carries the hold: callees that Lock m with it re-enter
//
// Holds are released in any order, and a re-entry never shortens the others.
// A lease's context ends with that lease: unlock inner holds first (as defer
// does). [WithOwner] makes every call through a handle one owner, for holds
// shared across processes. A ReentrantMutex is the write side of the
// [RWMutex] of the same name.
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
