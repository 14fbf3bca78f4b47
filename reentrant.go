package dlock

import (
	"context"
	"time"
)

// ReentrantMutex is an exclusive lock that its owner may take again while
// holding it. Each acquisition is a hold with its own [Lease]; the lock is
// free once every hold is released or has expired.
//
// The owner is the handle's owner id, never a goroutine: every Lock through
// one handle (or through handles made with the same [WithOwner] id) by the
// same owner re-enters. A re-entry returns a new lease with the same fencing
// token, counts one more hold, and never shortens the time the other holds
// have left: each hold expires on its own, on Redis's clock. Each lease's
// Unlock takes away its own hold only; when the last goes, the next waiter is
// woken.
//
// A ReentrantMutex is the write side of the [RWMutex] of the same name.
type ReentrantMutex struct{ h holdLock }

// ReentrantMutex returns the reentrant lock called name, owned by a random
// owner id unless [WithOwner] is given. Options override the Client's
// defaults. Nothing is sent to Redis; a bad name or option is returned by the
// first call that would, matching [ErrInvalid].
func (c *Client) ReentrantMutex(name string, opts ...Option) *ReentrantMutex {
	return &ReentrantMutex{h: c.newHoldLock(name, KindReentrant, opts)}
}

// Name returns the lock's name.
func (m *ReentrantMutex) Name() string { return m.h.name }

// Owner returns the handle's owner id. Give it to [WithOwner] in another
// handle or process to act as the same owner.
func (m *ReentrantMutex) Owner() string { return m.h.owner }

// TryLock makes one attempt and never waits: it takes the lock if it is free
// or held by this owner, else returns [ErrNotAcquired].
func (m *ReentrantMutex) TryLock(ctx context.Context) (*Lease, error) {
	return m.h.acquire(ctx, modeWrite, true)
}

// Lock takes the lock, re-entering at once if this owner holds it, and
// otherwise waiting for it as [Mutex.Lock] does.
func (m *ReentrantMutex) Lock(ctx context.Context) (*Lease, error) {
	return m.h.acquire(ctx, modeWrite, false)
}

// ReentrantState is a ReentrantMutex as [ReentrantMutex.Inspect] found it.
type ReentrantState struct {
	Held        bool          // some owner holds the lock
	HeldByOwner bool          // the holder is this handle's owner
	Count       int           // the holder's hold count; 0 when not held
	TTL         time.Duration // until the last hold expires unless renewed; 0 when not held
	Token       uint64        // the fencing token the holds share; 0 when not held
	Waiting     int           // Locks registered to be woken when it is free
}

// Inspect reports who holds the lock, how often, and for how long yet.
func (m *ReentrantMutex) Inspect(ctx context.Context) (ReentrantState, error) {
	s, err := m.h.inspect(ctx)
	if err != nil {
		return ReentrantState{}, err
	}
	return ReentrantState{
		Held: s.writeHolds > 0, HeldByOwner: s.writerIsOwner, Count: s.writeHolds,
		TTL: s.ttl, Token: s.writeToken, Waiting: s.writersWaiting,
	}, nil
}
