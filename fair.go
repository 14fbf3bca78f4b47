package dlock

import (
	"context"

	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
)

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
