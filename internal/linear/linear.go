// Package linear checks recorded histories of lock operations for
// linearizability with porcupine: the specifications the locks must meet,
// and a recorder. Kept apart from package check so that what imports that
// (the bench module) does not need porcupine.
package linear

import (
	"fmt"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// MutexOp is one call on an owner-aware, fenced mutex: an acquisition or a
// release by Owner.
type MutexOp struct {
	Release bool
	Owner   string
}

// MutexResult is what the call returned: OK (acquired, released) with the
// fencing token of an acquisition; Unknown when it failed with an error, so
// that it may or may not have taken effect (a timeout).
type MutexResult struct {
	OK      bool
	Token   uint64
	Unknown bool
}

type mutexState struct {
	holder string // "" when free
	token  uint64 // the highest token granted so far
}

// FencedMutexModel is the specification an owner-aware, fenced mutex must
// meet, for porcupine to check histories against: an acquisition succeeds
// only when the lock is free and mints a token above every earlier one, is
// refused only while someone holds it; a release succeeds only for the
// holder. An operation of unknown outcome may have taken effect or not.
// Holds do not expire in this model: record histories whose TTLs outlast
// them.
var FencedMutexModel = porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{mutexState{}} },
	Step: func(state, input, output interface{}) []interface{} {
		s, in, out := state.(mutexState), input.(MutexOp), output.(MutexResult)
		switch {
		case !in.Release && out.Unknown:
			// Applied and then let go of by its abandon, or not applied:
			// either way the lock is as it was (a token may have been spent).
			return []interface{}{s}
		case !in.Release && out.OK:
			if s.holder == "" && out.Token > s.token {
				return []interface{}{mutexState{holder: in.Owner, token: out.Token}}
			}
		case !in.Release:
			if s.holder != "" {
				return []interface{}{s}
			}
		case out.Unknown:
			next := []interface{}{s}
			if s.holder == in.Owner {
				next = append(next, mutexState{token: s.token})
			}
			return next
		case out.OK:
			if s.holder == in.Owner {
				return []interface{}{mutexState{token: s.token}}
			}
		default:
			if s.holder != in.Owner {
				return []interface{}{s}
			}
		}
		return nil
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(MutexOp), output.(MutexResult)
		verb := "acquire"
		if in.Release {
			verb = "release"
		}
		return fmt.Sprintf("%s by %s -> %+v", verb, in.Owner, out)
	},
}

// History records the operations of a run, on the monotonic clock, for a
// linearizability check. It is safe for concurrent use.
type History struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

// Call notes the start of an operation and returns the function that
// records it with its result.
func (h *History) Call(client int, input interface{}) (done func(output interface{})) {
	h.mu.Lock()
	if h.start.IsZero() {
		h.start = time.Now()
	}
	start := h.start
	h.mu.Unlock()
	call := time.Since(start).Nanoseconds()
	return func(output interface{}) {
		ret := time.Since(start).Nanoseconds()
		h.mu.Lock()
		defer h.mu.Unlock()
		h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: input, Call: call, Output: output, Return: ret})
	}
}

// Linearizable checks the history against model, within timeout. It returns
// porcupine's verdict: Ok, Illegal, or Unknown when it ran out of time.
func (h *History) Linearizable(model porcupine.NondeterministicModel, timeout time.Duration) porcupine.CheckResult {
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	return porcupine.CheckOperationsTimeout(model.ToModel(), ops, timeout)
}

// Len is how many operations were recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}
