package linear

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The model of renewed leases, for histories whose holds are renewed in
// the background (the explorer's): a hold's expiry is not set by the
// operations recorded, but it cannot end before its lease's deadline (the
// promise that loss is reported before Redis can give the lock to anyone
// else), and may end at any moment after it. One model covers every lock
// type; what differs between them is how holds share a lock (Mode).

// Mode is how a hold shares its lock.
type Mode uint8

const (
	// Exclusive shares with nobody: a mutex's hold, a writer's, a leader's.
	Exclusive Mode = iota
	// Shared shares with other Shared holds: a reader's.
	Shared
	// Permit shares with other Permits, up to the model's number of them.
	Permit
)

// LeaseOp is one call on a lock by Owner (one per acquisition). Lapse is,
// for an Acquire that succeeded, when its hold may have ended unseen: the
// lease's deadline, in nanoseconds since the history's start; for an
// Acquire of unknown outcome, the hold it may have taken may end at any
// moment from its call on, and, when Until is set, has ended by Until (a
// hold given back, or gone with its TTL). History fills in At.
type LeaseOp struct {
	Op    Kind
	Owner string
	Mode  Mode
	Lapse int64
	Until int64
	At    Window
}

func (o LeaseOp) within(w Window) interface{} { o.At = w; return o }

// leaseHolder is one hold in a leaseState.
type leaseHolder struct {
	owner string
	mode  Mode
	lapse int64 // the hold may have ended from then on
	until int64 // and has ended by then; 0: no bound
}

// leaseState is a lock's holds, encoded in a string so that states
// compare with == (porcupine merges equal states), the highest token
// granted, and the earliest moment the next operation can take effect:
// once a hold is taken to have ended unseen, at its lapse or later, no
// operation can be placed before then.
type leaseState struct {
	holders string
	token   uint64
	at      int64
}

func (s leaseState) decode() []leaseHolder {
	if s.holders == "" {
		return nil
	}
	var out []leaseHolder
	for _, rec := range strings.Split(s.holders, "\x1e") {
		f := strings.Split(rec, "\x1f")
		mode, _ := strconv.Atoi(f[1])
		lapse, _ := strconv.ParseInt(f[2], 10, 64)
		until, _ := strconv.ParseInt(f[3], 10, 64)
		out = append(out, leaseHolder{owner: f[0], mode: Mode(mode), lapse: lapse, until: until})
	}
	return out
}

func encode(hs []leaseHolder, token uint64, at int64) leaseState {
	recs := make([]string, len(hs))
	for i, h := range hs {
		recs[i] = h.owner + "\x1f" + strconv.Itoa(int(h.mode)) + "\x1f" + strconv.FormatInt(h.lapse, 10) + "\x1f" + strconv.FormatInt(h.until, 10)
	}
	slices.Sort(recs)
	return leaseState{holders: strings.Join(recs, "\x1e"), token: token, at: at}
}

// LeaseModel specifies a fenced lock of renewed leases (a Semaphore's with
// permits): an acquisition succeeds exactly while its mode fits beside the
// holds that last (Exclusive: none; Shared: no Exclusive; Permit: fewer
// than permits), with a token above every earlier one. A release or
// extension succeeds exactly for a hold that lasts. An acquisition of
// unknown outcome took nothing or a hold that may end at any moment. A hold
// may end unseen from its Lapse on, not before. Record outcomes that say
// nothing of the lock (a FairMutex refused behind its queue) as unknown.
func LeaseModel(permits int) porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{leaseState{}} },
		Step: func(state, input, output interface{}) []interface{} {
			s, in, out := state.(leaseState), input.(LeaseOp), output.(Result)
			if in.At.Return < s.at {
				return nil // it ended before a hold it saw gone could be
			}
			var next []interface{}
			for _, v := range views(s.decode(), in.At, s.at) {
				next = append(next, stepLease(v.holds, s.token, v.at, in, out, permits)...)
			}
			return next
		},
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(LeaseOp), output.(Result)
			return fmt.Sprintf("%s by %s (mode %d, lapse %.3f ms) -> %+v", in.Op, in.Owner, in.Mode, float64(in.Lapse)/1e6, out)
		},
	}
}

// view is the holds that last when an operation takes effect, and the
// earliest moment it can: the latest lapse of the holds it takes as gone.
type view struct {
	holds []leaseHolder
	at    int64
}

// views are the holds that may last when an operation in window w takes
// effect, no earlier than at: each hold whose lapse came by w's return may
// be gone, and one whose until came before w's call is. Every subset of
// those that may be gone is a view when they are few; otherwise none, all,
// and each alone gone (a lock has few holds that bar an acquisition: one,
// or a semaphore's permits).
func views(hs []leaseHolder, w Window, at int64) []view {
	var may []int
	for i, h := range hs {
		if h.lapse <= w.Return && !gone(h, w) {
			may = append(may, i)
		}
	}
	without := func(drop func(int) bool) view {
		v := view{at: at}
		for i, h := range hs {
			if drop(i) || gone(h, w) {
				v.at = max(v.at, h.lapse)
			} else {
				v.holds = append(v.holds, h)
			}
		}
		return v
	}
	if len(may) <= 4 {
		out := make([]view, 0, 1<<len(may))
		for mask := 0; mask < 1<<len(may); mask++ {
			out = append(out, without(func(i int) bool {
				j := slices.Index(may, i)
				return j >= 0 && mask&(1<<j) != 0
			}))
		}
		return out
	}
	out := []view{without(func(int) bool { return false }), without(func(i int) bool { return slices.Contains(may, i) })}
	for _, m := range may {
		out = append(out, without(func(i int) bool { return i == m }))
	}
	return out
}

// gone reports whether h has ended before an operation in window w.
func gone(h leaseHolder, w Window) bool { return h.until != 0 && h.until < w.Call }

// fits reports whether a hold of mode may be taken beside hs.
func fits(hs []leaseHolder, mode Mode, permits int) bool {
	count := 0
	for _, h := range hs {
		switch {
		case h.mode == Exclusive || mode == Exclusive:
			return false
		case h.mode != mode:
			return false // a lock is read-write or a semaphore, never both
		case h.mode == Permit:
			count++
		}
	}
	return mode != Permit || count < permits
}

func stepLease(hs []leaseHolder, token uint64, at int64, in LeaseOp, out Result, permits int) []interface{} {
	i := slices.IndexFunc(hs, func(h leaseHolder) bool { return h.owner == in.Owner })
	mine := i >= 0
	same := encode(hs, token, at)
	var gone leaseState
	if mine {
		gone = encode(slices.Delete(slices.Clone(hs), i, i+1), token, at)
	}
	switch {
	case in.Op == Acquire && out.Unknown:
		if mine || !fits(hs, in.Mode, permits) {
			return []interface{}{same}
		}
		ghost := leaseHolder{owner: in.Owner, mode: in.Mode, lapse: in.At.Call, until: in.Until}
		return []interface{}{same, encode(append(slices.Clone(hs), ghost), token, at)}
	case in.Op == Acquire && out.OK:
		if !mine && fits(hs, in.Mode, permits) && out.Token > token {
			return []interface{}{encode(append(slices.Clone(hs), leaseHolder{owner: in.Owner, mode: in.Mode, lapse: in.Lapse}), out.Token, at)}
		}
	case in.Op == Acquire:
		if !fits(hs, in.Mode, permits) {
			return []interface{}{same}
		}
	case out.Unknown && mine && in.Op == Release:
		return []interface{}{same, gone}
	case out.Unknown:
		return []interface{}{same}
	case out.OK && mine && in.Op == Release:
		return []interface{}{gone}
	case out.OK && mine:
		return []interface{}{same}
	case !out.OK && !mine:
		return []interface{}{same}
	}
	return nil
}

// NewHistoryAt is an empty history whose times count from start, for
// operations recorded after the fact with [History.Record].
func NewHistoryAt(start time.Time) *History { return &History{start: start} }

// Record adds an operation that ran from call to ret, as [History.Call]
// would have.
func (h *History) Record(client int, call, ret time.Time, input, output interface{}) {
	h.add(client, h.Since(call), h.Since(ret), input, output)
}

// Since is t in the history's time: nanoseconds since its start.
func (h *History) Since(t time.Time) int64 { return t.Sub(h.start).Nanoseconds() }
