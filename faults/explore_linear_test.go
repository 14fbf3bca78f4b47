//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/faults/linear"
	"github.com/dlockio/dlock/internal/family"
)

// The porcupine checker: every call a run makes (acquire, Extend, Unlock)
// is recorded with its window and outcome, and each lock name's history
// is checked against linear.LeaseModel, the specification of a fenced lock
// of renewed leases. It sees what the hold checkers do not: refusals while
// the lock was free, an Unlock or Extend confirmed for a hold that was no
// longer the caller's, a hold gone before its lease's deadline, tokens out
// of the order in which the holds took effect.

// linearTimeout bounds porcupine on one name's history; past it the
// verdict is unknown, logged, neither a pass nor a failure.
const linearTimeout = 2 * time.Second

// leaseCall is one recorded call on the locks of names.
type leaseCall struct {
	client    int
	names     []string
	call, ret time.Time
	op        linear.LeaseOp // Owner, Op and Mode; the history fills in the rest
	lapse     time.Time      // an acquisition's: its lease's deadline
	until     time.Time      // an acquisition in doubt's: gone by then (recordInDoubt); zero: no bound
	tokens    map[string]uint64
	out       linear.Result
}

// leaseRecorder collects a run's calls; its clients record at once.
type leaseRecorder struct {
	mu    sync.Mutex
	start time.Time
	calls []leaseCall
	// undone reports whether a write applied between call and ret may have
	// been undone since: lost with a master killed before its replica had
	// it (explore_failover_test.go).
	undone func(call, ret time.Time) bool
}

func (r *leaseRecorder) add(c leaseCall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
}

// modeOf is how a kind's holds share their lock.
func modeOf(kind string) linear.Mode {
	switch kindOf(kind).Mode {
	case family.Shared:
		return linear.Shared
	case family.Permit:
		return linear.Permit
	}
	return linear.Exclusive
}

// refusalTells reports whether a Try call of kind refused means the lock
// was held: not for a FairMutex (refused behind its queue), an RWMutex or
// ReentrantMutex (a reader refused behind a waiting writer, a writer
// behind readers' passes), a MultiLock (its parts come and go) or a
// Redlock (split votes).
func refusalTells(kind string) bool {
	return kind == "mutex" || kind == "election" || kind == "semaphore"
}

// acquired records an acquisition that returned a lease, once its
// deadline is final: lapse, in real time (see process.deadline).
func (r *leaseRecorder) acquired(client int, owner string, o op, call, ret time.Time, l *dlock.Lease, lapse time.Time) {
	r.add(leaseCall{client: client, names: o.Names, call: call, ret: ret, tokens: l.Tokens(), lapse: lapse,
		op: linear.LeaseOp{Op: linear.Acquire, Owner: owner, Mode: modeOf(o.Kind)}, out: linear.Result{OK: true}})
}

// refused records an acquisition that returned err. A Try refused after a
// read timeout (readTimeout) or more tells nothing either: go-redis may
// have sent its attempt twice, and the other copy taken the lock once
// free, held until the call gave it back before it returned, or, if that
// failed, for its TTL.
func (r *leaseRecorder) refused(client int, owner string, o op, call, ret time.Time, err error) {
	c := leaseCall{client: client, names: o.Names, call: call, ret: ret,
		op: linear.LeaseOp{Op: linear.Acquire, Owner: owner, Mode: modeOf(o.Kind)}, out: linear.Result{Unknown: true}}
	if o.Try && refusalTells(o.Kind) && errors.Is(err, dlock.ErrNotAcquired) && !grantExpired(err) {
		if ret.Sub(call) < readTimeout {
			c.out = linear.Result{}
		} else {
			c.until = ret.Add(max(o.TTL, o.Lease))
		}
	}
	r.add(c)
}

// grantExpired reports whether err is a grant that ran out before it could
// be confirmed (a late one, or one read after a suspension of its
// process: explore_suspend_test.go): ErrNotAcquired too, though the call
// held the lock for a while, so it tells nothing of other holds. dlock
// has no sentinel for it; its message says so.
func grantExpired(err error) bool {
	return strings.Contains(err.Error(), "grant expired before it could be confirmed")
}

// ended records an Unlock or Extend that returned err: nil is done,
// ErrNotHeld of an Unlock refused, anything else unknown (an Extend
// refused on a lease counted lost sends nothing). A Redlock's Unlock
// answers ErrNotHeld when fewer than a quorum of masters confirmed, a
// master's error counting as no confirmation, and its masters keep no
// release mark, so a resent release that was applied answers 0: it says
// nothing about whether the hold lasted. A MultiLock's Unlock releases
// every lock still its own and answers ErrNotHeld when any one was not:
// of several locks, it tells of none in particular (one lock expired
// while the Unlock was held up, another it released may be taken at once).
func (r *leaseRecorder) ended(client int, owner string, o op, kind linear.Kind, call, ret time.Time, err error) {
	out := linear.Result{Unknown: true}
	switch {
	case err == nil:
		out = linear.Result{OK: true}
	case kind == linear.Release && errors.Is(err, dlock.ErrNotHeld) && o.Kind != "redlock" && !(o.Kind == "multi" && len(o.Names) > 1):
		out = linear.Result{}
	}
	r.add(leaseCall{client: client, names: o.Names, call: call, ret: ret,
		op: linear.LeaseOp{Op: kind, Owner: owner, Mode: modeOf(o.Kind)}, out: out})
}

// checkLinearizable checks each name's history. Names of kinds a labelled
// run may give two holders (FLUSHALL, a standalone restart) are skipped:
// their holds may vanish before their leases' deadlines, the documented
// failure the overlap and token checks account for. An acquisition of
// unknown outcome on a name a fault's clean-up may have missed (doubtful)
// may take effect until the run's end: a late copy, with no tombstone to
// stop it.
func checkLinearizable(s *schedule, rec *leaseRecorder, kindOf map[string]string, doubtful map[string]bool, out *outcome) {
	byName := map[string]*linear.History{}
	var end time.Time
	for _, c := range rec.calls {
		if c.ret.After(end) {
			end = c.ret
		}
	}
	skipped := map[string]bool{}
	for _, c := range rec.calls {
		for _, name := range c.names {
			kind := kindOf[name]
			if s.overlapDocumented(kind, kind) {
				skipped[kind] = true
				continue
			}
			h := byName[name]
			if h == nil {
				h = linear.NewHistoryAt(rec.start)
				byName[name] = h
			}
			in, result, ret := c.op, c.out, c.ret
			if in.Op == linear.Acquire && result.OK {
				in.Lapse, result.Token = h.Since(c.lapse), c.tokens[name]
			}
			if in.Op == linear.Acquire && result.Unknown && doubtful[name] {
				ret = end // a late copy with no tombstone: no bound either
			} else if in.Op == linear.Acquire && result.Unknown && !c.until.IsZero() {
				in.Until = h.Since(c.until)
			}
			if in.Op == linear.Release && result.OK && rec.undone != nil && rec.undone(c.call, c.ret) {
				// The release may have come back with a failover: its
				// hold then lasted until its TTL, as if it never ended.
				result = linear.Result{Unknown: true}
			}
			h.Record(c.client, c.call, ret, in, result)
		}
	}
	for kind := range skipped {
		out.note("linearizable: %s not checked: a labelled run's holds may vanish before their deadlines", kind)
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	slices.Sort(names)
	model := linear.LeaseModel(semaphorePermits)
	for _, name := range names {
		h := byName[name]
		out.checks++
		switch h.Linearizable(model, linearTimeout) {
		case porcupine.Illegal:
			out.violate("linearizable: %s (%s): %d calls\n%s", name, kindOf[name], h.Len(), h.Explain(model))
		case porcupine.Unknown:
			out.note("linearizable: %s: porcupine ran out of its %v on %d calls: unknown", name, linearTimeout, h.Len())
		}
	}
}

// kindsOfNames maps each lock name of s to a kind that uses it (kinds
// that share names share a layout, and so a model).
func kindsOfNames(s *schedule) map[string]string {
	m := map[string]string{}
	for _, kind := range s.Kinds {
		for _, name := range s.names[kind] {
			m[name] = kind
		}
	}
	return m
}

// timedUnlock is Unlock with its window recorded.
func timedUnlock(ctx context.Context, rec *leaseRecorder, client int, owner string, o op, l *dlock.Lease) error {
	call := time.Now()
	err := l.Unlock(ctx)
	rec.ended(client, owner, o, linear.Release, call, time.Now(), err)
	return err
}

func (o *outcome) note(format string, args ...any) {
	o.notes = append(o.notes, fmt.Sprintf(format, args...))
}
