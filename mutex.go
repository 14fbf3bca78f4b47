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

// FairMutex is an exclusive lock taken in the order it was asked for: a
// release hands the lock to the head of the queue. Waiters keep their place
// by renewing it every [WithWaiterRefresh]; a dead waiter loses it within
// three refreshes. Its key is a [Mutex]'s, but a Mutex does not queue: do
// not mix the two on one name.
type FairMutex struct {
	handle
	spec *acquireSpec
}

var fairKind = mutexKind.releasedBy(scripts.FairRelease, scripts.FairAbandon)

// FairMutex returns the fair (first come, first served) lock called name,
// with options and bad input as [Client.Mutex]'s.
func (c *Client) FairMutex(name string, opts ...Option) *FairMutex {
	f := &FairMutex{handle: c.newHandle(name, opts, optionScope{"FairMutex", forMutex.takes})}
	f.spec, _ = f.layOut(acquireSpec{op: "lock", script: scripts.FairAcquire, publishes: true, queues: true, lease: leaseSpec{kind: fairKind}}, nil, nil)
	return f
}

// TryLock makes one attempt and never waits. It takes the lock only when it
// is free and nobody waits for it: a TryLock does not overtake the queue.
// Otherwise it returns [ErrNotAcquired].
func (f *FairMutex) TryLock(ctx context.Context) (*Lease, error) {
	return f.acquire(ctx, observe.KindFair, true, f.call)
}

// Lock takes the lock in its turn, until ctx ends or the wait set by
// [WithWait] runs out; then it leaves the queue and returns an error
// matching both [ErrNotAcquired] and ctx's error.
func (f *FairMutex) Lock(ctx context.Context) (*Lease, error) {
	return f.acquire(ctx, observe.KindFair, false, f.call)
}

// fairCall is one TryLock or Lock call. It remembers the fencing counter
// its last attempt read when it queued (-1: it did not), which a
// hand-over's token must exceed (see token_floor in common.lua).
type fairCall struct {
	call
	fenced int64
}

func (f *FairMutex) call(context.Context) *call {
	a := &fairCall{}
	a.grant = a
	return a.begin(&f.handle, f.spec, a)
}

func (a *fairCall) request(waiterID string, publish any) ([]any, string) {
	a.fenced = -1
	entry := a.entry(waiterID)
	return command(&a.call, entry, scripts.FairAcquireArgs{Acquire: a.shared(entry), Publish: publish, Info: a.spec.info}), entry
}

// entry is how a waiter queues (fair_lib.lua); "" stays "".
func (a *fairCall) entry(waiterID string) string {
	if waiterID == "" {
		return ""
	}
	return a.h.c.tagged(waiterID) + a.h.cfg.holderInfo
}

func (a *fairCall) valid(res []int64) bool { return len(res) >= 2 && len(res) <= 3 && res[0] != -1 }

func (a *fairCall) refused(res []int64, _ string) error {
	if len(res) == 3 {
		a.fenced = res[2]
	}
	return nil
}

// granted takes the lock handed over with a token above the counter the
// last attempt read, counting from its sending; any other is stale: nil.
func (a *fairCall) granted(h handOver) *Lease {
	if h.ref != "" || a.fenced < 0 || h.token <= uint64(a.fenced) {
		return nil
	}
	a.fenced = -1 // the hand-over took it out of the queue
	return a.lease(h.token, h.valid, nil)
}
