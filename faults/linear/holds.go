package linear

import (
	"fmt"
	"math/bits"

	"github.com/anishathalye/porcupine"
)

// The models of the locks whose holds are counted: reentrant, read-write
// and semaphore. Their holds do not expire: record histories whose TTLs
// outlast them. Holders are told apart by small numbers (bits of a mask),
// so a history has at most 64 of them.

// released is where a release may leave a lock that was in state before:
// in after (without the caller's hold) if it succeeded, and only if the hold
// was the caller's (mine); as it was, if refused, and only if it was not;
// either, if its outcome is unknown. nil: the result is not legal.
func released(before, after interface{}, mine bool, out Result) []interface{} {
	switch {
	case out.Unknown && mine:
		return []interface{}{before, after}
	case out.Unknown, !out.OK && !mine:
		return []interface{}{before}
	case out.OK && mine:
		return []interface{}{after}
	}
	return nil
}

// ReentrantOp is a call on a reentrant mutex by Owner, on its nested hold
// number Hold (0 for the outermost; below 64).
type ReentrantOp struct {
	Op    Kind
	Owner string
	Hold  int
}

type reentrantState struct {
	holder string
	holds  uint64 // the holder's holds that are live, one bit each
	token  uint64
}

// ReentrantMutexModel is the specification of a reentrant, fenced mutex:
// the first hold of an owner needs the lock free and mints a token above
// every earlier one; the owner's further holds succeed at once with the
// same token; another owner is refused while any hold lasts. Each hold is
// released once; the lock is free when the last goes.
var ReentrantMutexModel = porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{reentrantState{}} },
	Step: func(state, input, output interface{}) []interface{} {
		s, in, out := state.(reentrantState), input.(ReentrantOp), output.(Result)
		bit := uint64(1) << in.Hold
		mine := s.holder == in.Owner && s.holds&bit != 0
		switch {
		case in.Op == Acquire && out.Unknown:
			return []interface{}{s}
		case in.Op == Acquire && out.OK:
			switch {
			case s.holder == "" && out.Token > s.token:
				return []interface{}{reentrantState{holder: in.Owner, holds: bit, token: out.Token}}
			case s.holder == in.Owner && s.holds&bit == 0 && out.Token == s.token:
				s.holds |= bit
				return []interface{}{s}
			}
		case in.Op == Acquire:
			if s.holder != "" && s.holder != in.Owner {
				return []interface{}{s}
			}
		case in.Op == Release:
			after := s
			if after.holds &^= bit; after.holds == 0 {
				after.holder = ""
			}
			return released(s, after, mine, out)
		}
		return nil
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(ReentrantOp), output.(Result)
		return fmt.Sprintf("%s of hold %d by %s -> %+v", in.Op, in.Hold, in.Owner, out)
	},
}

// RWOp is a call on a read-write lock by Client (below 64), who holds at
// most one hold at a time, its own owner.
type RWOp struct {
	Op     Kind
	Write  bool
	Client int
}

type rwState struct {
	readers uint64 // one bit per client reading
	writer  int    // the client writing, plus one; 0: nobody
	token   uint64
}

// RWMutexModel is the specification of a fenced read-write lock whose
// owners each take one hold at a time: a write succeeds only while nobody
// holds the lock, a read only while nobody writes; each is refused only
// when it could not succeed. Every hold's token is above every earlier
// token. (Writer preference, which makes readers wait for a waiting writer,
// is outside it: record only Try calls.)
var RWMutexModel = porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{rwState{}} },
	Step: func(state, input, output interface{}) []interface{} {
		s, in, out := state.(rwState), input.(RWOp), output.(Result)
		bit := uint64(1) << in.Client
		free := s.writer == 0 && (in.Write && s.readers == 0 || !in.Write)
		mine := in.Write && s.writer == in.Client+1 || !in.Write && s.readers&bit != 0
		switch {
		case in.Op == Acquire && out.Unknown:
			return []interface{}{s}
		case in.Op == Acquire && out.OK:
			if free && out.Token > s.token {
				s.token = out.Token
				if in.Write {
					s.writer = in.Client + 1
				} else {
					s.readers |= bit
				}
				return []interface{}{s}
			}
		case in.Op == Acquire:
			if !free {
				return []interface{}{s}
			}
		case in.Op == Release:
			after := s
			if in.Write {
				after.writer = 0
			} else {
				after.readers &^= bit
			}
			return released(s, after, mine, out)
		}
		return nil
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(RWOp), output.(Result)
		mode := "read"
		if in.Write {
			mode = "write"
		}
		return fmt.Sprintf("%s %s by client %d -> %+v", mode, in.Op, in.Client, out)
	},
}

// SemaphoreOp is a call on a semaphore by Client (below 64), who holds at
// most one permit at a time.
type SemaphoreOp struct {
	Op     Kind
	Client int
}

type semaphoreState struct {
	holders uint64 // one bit per client holding a permit
	token   uint64
}

// SemaphoreModel is the specification of a fenced semaphore of permits: an
// acquisition succeeds only while fewer than permits are held and is
// refused only while all are; every permit's token is above every earlier
// token; a release succeeds only for a holder.
func SemaphoreModel(permits int) porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{semaphoreState{}} },
		Step: func(state, input, output interface{}) []interface{} {
			s, in, out := state.(semaphoreState), input.(SemaphoreOp), output.(Result)
			bit := uint64(1) << in.Client
			free := bits.OnesCount64(s.holders) < permits
			mine := s.holders&bit != 0
			switch {
			case in.Op == Acquire && out.Unknown:
				return []interface{}{s}
			case in.Op == Acquire && out.OK:
				if free && !mine && out.Token > s.token {
					return []interface{}{semaphoreState{holders: s.holders | bit, token: out.Token}}
				}
			case in.Op == Acquire:
				if !free {
					return []interface{}{s}
				}
			case in.Op == Release:
				return released(s, semaphoreState{holders: s.holders &^ bit, token: s.token}, mine, out)
			}
			return nil
		},
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(SemaphoreOp), output.(Result)
			return fmt.Sprintf("%s by client %d -> %+v", in.Op, in.Client, out)
		},
	}
}
