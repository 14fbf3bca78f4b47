package dlock

import (
	"context"
	"time"
)

// RWMutex is a distributed read-write lock: many readers or one writer.
//
// Unlike a [sync.RWMutex], it is reentrant, and so it must know who the
// owner of each hold is. Go has no goroutine id: the owner is the call chain,
// told by the context. A handle may be shared between goroutines as a
// sync.RWMutex is: each Lock or RLock whose context carries no hold of the
// lock is an owner of its own. One whose context carries a live hold of
// this lock (made by [Lease.Context], or derived from one; a lease that
// has ended carries none) acts as that hold's owner, through any handle of
// the lock. [WithOwner] instead makes every call through the handle the
// given owner, whatever its context: for holds shared across processes.
//
// Each acquisition is a hold with its own [Lease], and what an owner may do
// depends on what it holds:
//   - Reads and writes are reentrant: an owner holding a mode takes it again
//     at once, with the same fencing token, even while a writer waits.
//   - The owner writing may also read (RLock with the write lease's
//     context), and keep its reads after releasing the write (downgrade).
//     An owner holding only reads cannot write: that would deadlock as soon
//     as two readers tried, so it gets [ErrUpgrade] at once.
//   - Writers are preferred, as with [sync.RWMutex]: once a writer waits, new
//     readers wait too, so a steady stream of readers cannot starve it. When
//     the writer is done, the readers that waited for it all go before the
//     next writer, so writers cannot starve readers either. A waiting writer
//     that died holds readers back for its registration's lifetime at most
//     (three waiter refreshes, 3 s by default).
//   - Each hold expires on its own on Redis's clock: a crashed reader stops
//     blocking writers within its TTL, however the other readers renew.
//
// Holds are released one lease at a time, in any order; the owner holds a
// mode until its last hold of that mode goes. A lease's context ends with
// that lease, and so does every context derived from it: after a downgrade,
// go on reading under the read lease's context, made from one that
// outlives the write.
//
// A writer's release wakes every waiting reader; the last hold's release
// wakes one writer. Fencing tokens are minted for every new hold of an owner
// in a mode, readers' included, so a writer's token is above every token
// handed out before it.
type RWMutex struct{ holdLock }

// RWMutex returns the read-write lock called name. Options override the
// Client's defaults.
// Nothing is sent to Redis; a bad name or option is returned by the first
// call that would, matching [ErrInvalid].
func (c *Client) RWMutex(name string, opts ...Option) *RWMutex {
	return &RWMutex{holdLock: c.newHoldLock(name, KindWrite, opts)}
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

// RWState is an RWMutex as [RWMutex.Inspect] found it.
type RWState struct {
	WriteHolds     int           // holds of the write side, all by one owner; 0: nobody writes
	WriterIsOwner  bool          // the writer is the owner the call acts as: ctx's hold's, or WithOwner's
	ReadHolds      int           // read holds of all owners
	Readers        int           // owners holding read locks
	OwnerReadHolds int           // the read holds of the owner the call acts as
	TTL            time.Duration // until the last hold expires unless renewed; 0 when not held
	WritersWaiting int           // writers registered to be woken
	ReadersWaiting int           // readers registered to be woken
	WriteToken     uint64        // the writer's fencing token; 0: nobody writes
	LastToken      uint64        // the highest fencing token minted for the name
	Holders        []Holder      // who holds it, the writer first
}

// Inspect reports who holds the lock, how often, and who waits. The owner's
// fields are about the owner a Lock with ctx would act as.
func (rw *RWMutex) Inspect(ctx context.Context) (RWState, error) {
	s, err := rw.inspect(ctx)
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
