//go:build faults

package faults

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/dlockio/dlock/faults/linear"
	"github.com/dlockio/dlock/observe"
)

// A waiting call may hold its lock for a while under no lease it returns:
// a grant it gave back unconfirmed (it came back too late, or Redis was
// unavailable to confirm it), or an attempt in doubt that it cleaned up
// after. dlock reports each as a WaitRetry with an error; the explorer
// marks the call, through its context, and the history gets a hold of
// unknown outcome beside the call's own (recordInDoubt): a definite
// refusal of another client while it lasted is no violation. Before, a
// soak's TryLock refused while a waiting Lock held a grant it then gave
// back read as a refusal with nobody holding the lock ("linearizable",
// seed 1795714824042407448).

// inDoubtKey is the context key of a call's mark.
type inDoubtKey struct{}

// withInDoubt returns ctx carrying a mark that observedInDoubt sets.
func withInDoubt(ctx context.Context) (context.Context, *atomic.Bool) {
	mark := new(atomic.Bool)
	return context.WithValue(ctx, inDoubtKey{}, mark), mark
}

// observedInDoubt is the explorer's Observer: it marks a call that may have
// held its lock under no lease.
var observedInDoubt = &observe.Observer{Wait: func(ctx context.Context, ev observe.WaitEvent) {
	if ev.Step != observe.WaitRetry || ev.Err == nil {
		return
	}
	if mark, ok := ctx.Value(inDoubtKey{}).(*atomic.Bool); ok {
		mark.Store(true)
	}
}}

// recordInDoubt records, for an acquisition that returned a lease after it
// may have held the lock under none, that earlier hold: an acquisition of
// unknown outcome, an owner of its own, over the call's window, gone a TTL
// after the call returned at the latest (given back before the call went
// on, or, if the give-back failed, run out). (A call that returned no
// lease is of unknown outcome already.)
func (r *leaseRecorder) recordInDoubt(client int, owner string, o op, call, ret time.Time) {
	r.add(leaseCall{client: client, names: o.Names, call: call, ret: ret, until: ret.Add(max(o.TTL, o.Lease)),
		op: linear.LeaseOp{Op: linear.Acquire, Owner: owner + " (given back)", Mode: modeOf(o.Kind)}, out: linear.Result{Unknown: true}})
}
