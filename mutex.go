package dlock

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
)

// Mutex is a distributed exclusive lock: at most one lease on its name is
// held at a time (within the limits of leases: see the package doc). It is
// a handle, safe for concurrent use; each acquisition returns a [Lease].
type Mutex struct {
	handle
	spec *acquireSpec
}

var mutexKind = &leaseKind{
	extend:  scripts.MutexExtend,
	release: scripts.MutexRelease,
	ttl:     scripts.MutexTTL,
	abandon: scripts.MutexAbandon,
}

// releasedBy is a Mutex hold released and abandoned by other scripts: a
// FairMutex's or an Election's, which Mutex scripts renew and inspect.
func (k leaseKind) releasedBy(release, abandon *redis.Script) *leaseKind {
	k.release, k.abandon = release, abandon
	return &k
}

// Mutex returns the exclusive lock called name. Options override the
// Client's defaults for this lock. Nothing is sent to Redis; a bad name or
// option is returned by the first call, matching [ErrInvalid].
func (c *Client) Mutex(name string, opts ...Option) *Mutex {
	m := &Mutex{handle: c.newHandle(name, opts, forMutex)}
	m.spec, _ = m.layOut(acquireSpec{op: "lock", script: scripts.MutexAcquire, lease: leaseSpec{kind: mutexKind}}, nil, nil)
	return m
}

// TryLock makes one attempt to take the lock and never waits. It returns
// [ErrNotAcquired] when someone else holds it, and an error matching
// [ErrUnavailable] when Redis cannot serve it for a while.
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) {
	return m.acquire(ctx, observe.KindMutex, true, m.call)
}

// Lock takes the lock, waiting while someone else holds it, until ctx ends or
// the wait set by [WithWait] runs out; then it returns an error matching both
// [ErrNotAcquired] and ctx's error. A release hands the lock to one waiting
// Lock; a newcomer does not barge in. [ErrUnavailable] does not end the wait.
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	return m.acquire(ctx, observe.KindMutex, false, m.call)
}

// mutexCall is one TryLock or Lock call, numbering its registrations.
type mutexCall struct {
	call
	attempts   int
	registered string // the registration the last refused attempt made
}

func (m *Mutex) call(context.Context) *call {
	a := &mutexCall{}
	a.grant = a
	return a.begin(&m.handle, m.spec, a)
}

// request registers a waiter as hand_next.lua reads it.
func (a *mutexCall) request(waiterID string, _ any) ([]any, string) {
	a.attempts++
	entry := ""
	if waiterID != "" {
		ttl, _ := a.h.cfg.holdTTL()
		entry = a.h.c.tagged(waiterID) + ":" + strconv.Itoa(a.attempts) + ":" + strconv.FormatInt(ttl.Milliseconds(), 10) + ":" + a.owner + a.h.cfg.holderInfo
	}
	return command(&a.call, entry, scripts.MutexAcquireArgs{Acquire: a.shared(entry), Previous: a.registered, Info: a.spec.info}), entry
}

func (a *mutexCall) refused(_ []int64, entry string) error {
	if entry != "" {
		a.registered = entry
	}
	return nil
}

// granted takes the lock handed over to the latest registration, else nil.
// The lease counts from the sending of the attempt that registered.
func (a *mutexCall) granted(h handOver) *Lease {
	if h.ref != strconv.Itoa(a.attempts) || a.registered == "" {
		return nil
	}
	a.registered = "" // popped by the hand-over
	return a.lease(h.token, h.valid, nil)
}

// entry is "": leave withdraws the call's last registration (abandonArgs).
func (a *mutexCall) entry(string) string { return "" }

// abandonArgs withdraw entry and the registration before it, or the last.
func (a *mutexCall) abandonArgs(entry string) scripts.AbandonArgs {
	if entry == "" {
		return scripts.AbandonArgs{Waiter: a.registered, Also: ""}
	}
	return scripts.AbandonArgs{Waiter: entry, Also: a.registered}
}
