// Package linear checks recorded histories of lock operations for
// linearizability with porcupine: the specifications the locks must meet
// (one model per lock type), and a recorder. It is a test oracle, so it
// lives in the faults module: porcupine stays out of dlock's go.mod, and
// out of the module graph of everyone who requires dlock.
package linear

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is what an operation does to a lock.
type Kind uint8

const (
	// Acquire takes a hold: TryLock, TryRLock, TryAcquire.
	Acquire Kind = iota
	// Release lets a hold go: Unlock.
	Release
	// Extend sets a hold's TTL anew: Extend.
	Extend
)

func (k Kind) String() string {
	return [...]string{"acquire", "release", "extend"}[k]
}

// Result is what an operation returned: OK (acquired, released, extended)
// with the fencing token of an acquisition; Unknown when it failed with an
// error, so that it may or may not have taken effect (a timeout). Neither:
// refused (ErrNotAcquired, ErrNotHeld).
type Result struct {
	OK      bool
	Token   uint64
	Unknown bool
}

// Window is when an operation ran, in nanoseconds of the monotonic clock
// since the history's first call: it took effect somewhere in between.
// History fills it in on the inputs that carry one.
type Window struct{ Call, Return int64 }

// windowed is an input whose model needs to know when it ran (to expire
// holds).
type windowed interface{ within(Window) interface{} }

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
		h.add(client, call, ret, input, output)
	}
}

func (h *History) add(client int, call, ret int64, input, output interface{}) {
	if in, ok := input.(windowed); ok {
		input = in.within(Window{Call: call, Return: ret})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: input, Call: call, Output: output, Return: ret})
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

// Explain says where a history that fails model stops being explicable:
// the end of the longest linearization porcupine found, and the operations
// it could not place after it, earliest return first.
func (h *History) Explain(model porcupine.NondeterministicModel) string {
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	_, info := porcupine.CheckOperationsVerbose(model.ToModel(), ops, time.Minute)
	var longest []porcupine.Operation
	for _, partition := range info.PartialLinearizationsOperations() {
		for _, lin := range partition {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	describe := func(op porcupine.Operation) string {
		return fmt.Sprintf("%9.3f–%9.3f ms  client %d  %s\n", float64(op.Call)/1e6, float64(op.Return)/1e6, op.ClientId, model.DescribeOperation(op.Input, op.Output))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "longest linearization: %d of %d operations; its end:\n", len(longest), len(ops))
	for _, op := range longest[max(0, len(longest)-8):] {
		b.WriteString(describe(op))
	}
	placed := map[porcupine.Operation]bool{}
	for _, op := range longest {
		placed[op] = true
	}
	var rest []porcupine.Operation
	for _, op := range ops {
		if !placed[op] {
			rest = append(rest, op)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Return < rest[j].Return })
	b.WriteString("not placed after it:\n")
	for _, op := range rest[:min(8, len(rest))] {
		b.WriteString(describe(op))
	}
	return b.String()
}
