package dlock

import (
	"context"
	"fmt"
	"time"
)

// MutexState is a Mutex or FairMutex as [Mutex.Inspect] or
// [FairMutex.Inspect] found it. Whose hold it is stays unsaid: a Mutex's
// owner token is its holder's secret.
type MutexState struct {
	Held      bool
	TTL       time.Duration // until the hold expires unless renewed; -1: no expiry; 0: not held
	LastToken uint64        // the highest fencing token minted for the name: the holder's while held (see [LockInfo])
	Waiting   int           // Locks registered to be woken (queued, for a FairMutex)
	Info      *HolderInfo   // what the holder stored with [WithHolderInfo]; nil when none
}

// Inspect reports whether the lock is held, for how long yet, and how many
// wait for it: [Client.Describe] for this handle's name and prefix.
func (m *Mutex) Inspect(ctx context.Context) (MutexState, error) {
	if err := m.check(ctx); err != nil {
		return MutexState{}, err
	}
	return m.c.inspectMutex(ctx, m.name, m.keys)
}

// Inspect reports whether the lock is held, for how long yet, and how many
// are queued for it: [Client.Describe] for this handle's name and prefix.
func (f *FairMutex) Inspect(ctx context.Context) (MutexState, error) {
	if err := f.check(ctx); err != nil {
		return MutexState{}, err
	}
	return f.c.inspectMutex(ctx, f.name, f.keys)
}

// inspectMutex describes the lock at k as a Mutex. A name another type
// holds is of the wrong type, as it is to the Mutex's Lock.
func (c *Client) inspectMutex(ctx context.Context, name string, k keys) (MutexState, error) {
	info, err := c.describe(ctx, name, k)
	if err != nil {
		return MutexState{}, err
	}
	switch info.Kind {
	case KindRead, KindWrite, KindReentrant, KindSemaphore:
		return MutexState{}, fmt.Errorf("%w: lock %q (inspect): %s holds it, not a Mutex", ErrWrongType, name, info.Kind)
	}
	s := MutexState{TTL: info.TTL, LastToken: info.LastToken, Waiting: info.WritersWaiting}
	if len(info.Holders) > 0 {
		s.Held, s.Info = true, info.Holders[0].Info
	}
	return s, nil
}
