package dlock

import (
	"context"

	"github.com/dlockio/dlock/observe"
)

// ReentrantMutex is an exclusive lock its owner may take again while
// holding it: the write side of the [RWMutex] of the same name. Each
// acquisition is a hold with its own [Lease] and the same fencing token,
// expiring on its own and released in any order. The owner is the call
// chain: a Lock whose context carries a live hold of this lock
// ([Lease.Context]) re-enters it. [WithOwner] makes every call through a
// handle one owner.
type ReentrantMutex struct{ holdLock }

// ReentrantMutex returns the reentrant lock called name. Options override
// the Client's defaults. Nothing is sent to Redis; a bad name or option is
// returned by the first call that would, matching [ErrInvalid].
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
