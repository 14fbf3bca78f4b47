package linear

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// record adds an operation that ran from call to ret (in any unit).
func record(h *History, client int, call, ret int64, in MutexOp, out MutexResult) {
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

func TestFencedMutexModel_FlagsTwoHoldersAndRepeatedTokens(t *testing.T) {
	acquire := func(owner string) MutexOp { return MutexOp{Owner: owner} }
	release := func(owner string) MutexOp { return MutexOp{Release: true, Owner: owner} }
	for _, tc := range []struct {
		name string
		ops  func(h *History)
		want porcupine.CheckResult
	}{
		{"one holder after another", func(h *History) {
			record(h, 0, 0, 1, acquire("a"), MutexResult{OK: true, Token: 1})
			record(h, 1, 2, 3, acquire("b"), MutexResult{})
			record(h, 0, 4, 5, release("a"), MutexResult{OK: true})
			record(h, 1, 6, 7, acquire("b"), MutexResult{OK: true, Token: 2})
			record(h, 0, 8, 9, release("a"), MutexResult{}) // a's second release is refused
		}, porcupine.Ok},
		{"two holders at once", func(h *History) {
			record(h, 0, 0, 1, acquire("a"), MutexResult{OK: true, Token: 1})
			record(h, 1, 2, 3, acquire("b"), MutexResult{OK: true, Token: 2})
		}, porcupine.Illegal},
		{"a token not above the last", func(h *History) {
			record(h, 0, 0, 1, acquire("a"), MutexResult{OK: true, Token: 5})
			record(h, 0, 2, 3, release("a"), MutexResult{OK: true})
			record(h, 1, 4, 5, acquire("b"), MutexResult{OK: true, Token: 5})
		}, porcupine.Illegal},
		{"a release by a non-holder that succeeds", func(h *History) {
			record(h, 0, 0, 1, acquire("a"), MutexResult{OK: true, Token: 1})
			record(h, 1, 2, 3, release("b"), MutexResult{OK: true})
		}, porcupine.Illegal},
		{"overlapping calls ordered either way", func(h *History) {
			record(h, 0, 0, 10, acquire("a"), MutexResult{OK: true, Token: 2})
			record(h, 1, 1, 9, acquire("b"), MutexResult{})
		}, porcupine.Ok},
		{"an acquisition of unknown outcome", func(h *History) {
			record(h, 0, 0, 1, acquire("a"), MutexResult{Unknown: true})
			record(h, 1, 2, 3, acquire("b"), MutexResult{OK: true, Token: 2})
		}, porcupine.Ok},
	} {
		var h History
		tc.ops(&h)
		if got := h.Linearizable(FencedMutexModel, time.Minute); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
