package dlock

import (
	"context"

	"github.com/dlockio/dlock/scripts"
)

// Who owns a hold of a ReentrantMutex or RWMutex. Go has no goroutine id,
// and a handle is shared between goroutines as a sync.RWMutex is, so
// neither can be the owner: the call chain is, and it says so through its
// context. Lease.Context puts the lease's hold in the context it returns;
// a Lock whose context carries a live hold of the same lock acts as that
// hold's owner (re-entry), any other is an owner of its own. WithOwner
// fixes the owner instead, for sharing holds across processes.

// heldKey is the context key of a hold of a read-write lock: the lock's key
// (prefix and name), so that every handle of the lock, of any Client,
// finds it, and a hold of another lock does not.
type heldKey string

// withHold returns parent carrying l, a lease of a read-write lock. A later
// hold of the same lock put in a context derived from it takes its place.
func withHold(parent context.Context, l *Lease) context.Context {
	return context.WithValue(parent, heldKey(l.keys[0]), l)
}

// ownerFor is the owner a call on h with ctx acts as: the id given to
// WithOwner; else the owner of the hold of this lock ctx carries, while its
// lease is held (one released or lost carries nothing: its owner may still
// hold the lock through other leases, and must not be joined by a caller
// that only kept the context); else "", a new owner.
func (h *holdLock) ownerFor(ctx context.Context) string {
	if h.owner != "" {
		return h.owner
	}
	if l, ok := ctx.Value(h.heldKey).(*Lease); ok && l.heldLocally() == nil {
		return holdOwner(l.owner)
	}
	return ""
}

// holdOwner is the owner in a hold's member: mode, hold id, owner (see
// holdAcquirer.member and parse in rw_lib.lua).
func holdOwner(member string) string { return member[1+scripts.OwnerTokenDigits:] }
