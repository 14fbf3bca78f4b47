package linear

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// ExpirySlack widens the bounds of when a hold expires, for the timer and
// clock-rate differences between the test process and Redis.
const ExpirySlack = 2 * time.Millisecond

// MutexOp is one call on a mutex by Owner. TTL is the hold's time to live
// an Acquire or Extend sets; 0 means the hold does not expire within the
// history. History fills in At.
type MutexOp struct {
	Op    Kind
	Owner string
	TTL   time.Duration
	At    Window
}

func (o MutexOp) within(w Window) interface{} { o.At = w; return o }

type mutexState struct {
	holder string // "" when free
	token  uint64 // the highest token granted so far
	// The hold's expiry lies in [expLo, expHi]: it was set by an operation
	// that took effect somewhere in its window. No expiry when both are 0.
	expLo, expHi int64
	// after: an operation before in the order took a hold as lapsed, so
	// took effect no sooner than the hold's expLo, and every operation
	// after it no sooner either: one that returned before is not placed
	// here.
	after int64
}

// OwnerMutexModel is the specification of an owner-aware mutex: an
// acquisition succeeds only while nobody holds the lock and is refused only
// while somebody does; a release or extension succeeds only for the holder
// of a hold that has not expired. Holds expire their TTL after the
// operation that set it (within [ExpirySlack]). An acquisition of unknown
// outcome was not applied, or left a hold nobody can release that its
// abandon may end at any moment and its TTL ends at the latest. Tokens are
// not checked.
var OwnerMutexModel = mutexModel(false)

// FencedMutexModel is [OwnerMutexModel] with fencing tokens: each
// acquisition's token is above every token granted before it.
var FencedMutexModel = mutexModel(true)

func mutexModel(fenced bool) porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{mutexState{}} },
		Step: func(state, input, output interface{}) []interface{} {
			s, in, out := state.(mutexState), input.(MutexOp), output.(Result)
			var next []interface{}
			for _, v := range s.views(in.At) {
				next = append(next, v.step(in, out, fenced)...)
			}
			return next
		},
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(MutexOp), output.(Result)
			return fmt.Sprintf("%s by %s (ttl %v) in [%d, %d] -> %+v", in.Op, in.Owner, in.TTL, in.At.Call, in.At.Return, out)
		},
	}
}

// views are the states the lock may be in at the moment an operation in
// window w took effect: a hold that may have expired by then may be gone.
func (s mutexState) views(w Window) []mutexState {
	switch {
	case s.holder == "" || s.expHi == 0:
		return []mutexState{s}
	case w.Call >= s.expHi:
		return []mutexState{s.freed()}
	case w.Return >= s.expLo:
		lapsed := s.freed()
		lapsed.after = max(s.after, s.expLo)
		return []mutexState{s, lapsed}
	}
	return []mutexState{s}
}

func (s mutexState) freed() mutexState { return mutexState{token: s.token, after: s.after} }

// held is s with owner's hold expiring ttl after an operation in w.
func (s mutexState) held(owner string, token uint64, ttl time.Duration, w Window) mutexState {
	s.holder, s.token = owner, token
	s.expLo, s.expHi = 0, 0
	if ttl > 0 {
		s.expLo = w.Call + int64(ttl-ExpirySlack)
		s.expHi = w.Return + int64(ttl+ExpirySlack)
	}
	return s
}

func (s mutexState) step(in MutexOp, out Result, fenced bool) []interface{} {
	if in.At.Return < s.after {
		return nil
	}
	mine := s.holder != "" && s.holder == in.Owner
	switch {
	case in.Op == Acquire && out.Unknown:
		if s.holder != "" {
			return []interface{}{s}
		}
		// Not applied; or applied and given back by its abandon before the
		// call returned, or, the abandon lost too, held until it expires.
		// Others may see the hold meanwhile: it may vanish at any moment
		// from the call on, and must by its expiry.
		ghost := s.held("\x00unknown:"+in.Owner, s.token, in.TTL, in.At)
		ghost.expLo, ghost.expHi = in.At.Call, math.MaxInt64
		if in.TTL > 0 {
			ghost.expHi = in.At.Return + int64(in.TTL+ExpirySlack)
		}
		return []interface{}{s, ghost}
	case in.Op == Acquire && out.OK:
		if s.holder == "" && (!fenced || out.Token > s.token) {
			return []interface{}{s.held(in.Owner, max(s.token, out.Token), in.TTL, in.At)}
		}
	case in.Op == Acquire:
		if s.holder != "" {
			return []interface{}{s}
		}
	case out.Unknown:
		if !mine {
			return []interface{}{s}
		}
		if in.Op == Release {
			return []interface{}{s, s.freed()}
		}
		return []interface{}{s, s.held(s.holder, s.token, in.TTL, in.At)}
	case out.OK:
		if mine && in.Op == Release {
			return []interface{}{s.freed()}
		}
		if mine {
			return []interface{}{s.held(s.holder, s.token, in.TTL, in.At)}
		}
	default: // refused
		if !mine {
			return []interface{}{s}
		}
	}
	return nil
}
