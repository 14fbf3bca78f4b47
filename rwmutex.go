package dlock

import (
	"context"
	"time"
)

// RWMutex is a distributed read-write lock: many readers or one writer.
//
// Holds are counted per owner (the handle's owner id, see [WithOwner]),
// never per goroutine, and each acquisition is a hold with its own [Lease]:
//   - Reads and writes are reentrant: an owner holding a mode takes it again
//     at once, with the same fencing token.
//   - The owner writing may also read, and keep its reads after releasing the
//     write (downgrade). An owner holding only reads cannot write: that would
//     deadlock as soon as two readers tried, so it gets [ErrUpgrade] at once.
//   - Writers are preferred, as with [sync.RWMutex]: once a writer waits, new
//     readers wait too, so a steady stream of readers cannot starve it. When
//     the writer is done, the readers that waited for it all go before the
//     next writer, so writers cannot starve readers either. A waiting writer
//     that died holds readers back for its registration's lifetime at most
//     (three waiter refreshes, 3 s by default).
//   - Each hold expires on its own on Redis's clock: a crashed reader stops
//     blocking writers within its TTL, however the other readers renew.
//
// A writer's release wakes every waiting reader; the last hold's release
// wakes one writer. Fencing tokens are minted for every new hold of an owner
// in a mode, readers' included, so a writer's token is above every token
// handed out before it.
type RWMutex struct{ h holdLock }

// RWMutex returns the read-write lock called name, owned by a random owner
// id unless [WithOwner] is given. Options override the Client's defaults.
// Nothing is sent to Redis; a bad name or option is returned by the first
// call that would, matching [ErrInvalid].
func (c *Client) RWMutex(name string, opts ...Option) *RWMutex {
	return &RWMutex{h: c.newHoldLock(name, KindWrite, opts)}
}

// Name returns the lock's name.
func (rw *RWMutex) Name() string { return rw.h.name }

// Owner returns the handle's owner id. Give it to [WithOwner] in another
// handle or process to act as the same owner.
func (rw *RWMutex) Owner() string { return rw.h.owner }

// Lock takes the write side, waiting for readers and any other writer to
// leave, until ctx ends or the wait set by [WithWait] runs out. It returns
// [ErrUpgrade] when this owner holds only read locks.
func (rw *RWMutex) Lock(ctx context.Context) (*Lease, error) {
	return rw.h.acquire(ctx, modeWrite, false)
}

// TryLock makes one attempt at the write side and never waits; it returns
// [ErrNotAcquired] when someone else reads or writes.
func (rw *RWMutex) TryLock(ctx context.Context) (*Lease, error) {
	return rw.h.acquire(ctx, modeWrite, true)
}

// RLock takes a read lock, waiting while another owner writes or a writer
// waits, until ctx ends or the wait set by [WithWait] runs out.
func (rw *RWMutex) RLock(ctx context.Context) (*Lease, error) {
	return rw.h.acquire(ctx, modeRead, false)
}

// TryRLock makes one attempt at a read lock and never waits; it returns
// [ErrNotAcquired] when another owner writes or a writer waits.
func (rw *RWMutex) TryRLock(ctx context.Context) (*Lease, error) {
	return rw.h.acquire(ctx, modeRead, true)
}

// RWState is an RWMutex as [RWMutex.Inspect] found it.
type RWState struct {
	WriteHolds     int           // holds of the write side, all by one owner; 0: nobody writes
	WriterIsOwner  bool          // the writer is this handle's owner
	ReadHolds      int           // read holds of all owners
	Readers        int           // owners holding read locks
	OwnerReadHolds int           // this handle's owner's read holds
	TTL            time.Duration // until the last hold expires unless renewed; 0 when not held
	WritersWaiting int           // writers registered to be woken
	ReadersWaiting int           // readers registered to be woken
	WriteToken     uint64        // the writer's fencing token; 0: nobody writes
	LastToken      uint64        // the highest fencing token minted for the name
	Holders        []Holder      // who holds it, the writer first
}

// Inspect reports who holds the lock, how often, and who waits.
func (rw *RWMutex) Inspect(ctx context.Context) (RWState, error) {
	s, err := rw.h.inspect(ctx)
	if err != nil {
		return RWState{}, err
	}
	return RWState{
		WriteHolds: s.writeHolds, WriterIsOwner: s.writerIsOwner,
		ReadHolds: s.readHolds, Readers: s.readers, OwnerReadHolds: s.ownReads,
		TTL: s.ttl, WritersWaiting: s.writersWaiting, ReadersWaiting: s.readersWaiting,
		WriteToken: s.writeToken, LastToken: s.lastToken, Holders: s.holders,
	}, nil
}
