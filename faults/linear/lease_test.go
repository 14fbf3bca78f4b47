package linear

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

func TestLeaseModel(t *testing.T) {
	const never = 1 << 40 // a lapse no operation here reaches
	acquire := func(owner string, mode Mode, lapseMs int64) LeaseOp {
		return LeaseOp{Op: Acquire, Owner: owner, Mode: mode, Lapse: lapseMs * 1e6}
	}
	release := func(owner string) LeaseOp { return LeaseOp{Op: Release, Owner: owner} }
	extend := func(owner string) LeaseOp { return LeaseOp{Op: Extend, Owner: owner} }
	checkCases(t, LeaseModel(2), []historyCase{
		{"one holder after another, a second release refused", func(h *History) {
			at(h, 0, 0, 1, acquire("a", Exclusive, never), tok(1))
			at(h, 1, 2, 3, acquire("b", Exclusive, never), refused)
			at(h, 0, 4, 5, release("a"), ok)
			at(h, 1, 6, 7, acquire("c", Exclusive, never), tok(2))
			at(h, 0, 8, 9, release("a"), refused)
		}, porcupine.Ok},
		{"two holders at once", func(h *History) {
			at(h, 0, 0, 1, acquire("a", Exclusive, never), tok(1))
			at(h, 1, 2, 3, acquire("b", Exclusive, never), tok(2))
		}, porcupine.Illegal},
		{"a second holder after the first lease's deadline", func(h *History) {
			at(h, 0, 0, 1, acquire("a", Exclusive, 10), tok(1))
			at(h, 1, 11, 12, acquire("b", Exclusive, never), tok(2))
		}, porcupine.Ok},
		{"a second holder before the first lease's deadline", func(h *History) {
			at(h, 0, 0, 1, acquire("a", Exclusive, 10), tok(1))
			at(h, 1, 5, 6, acquire("b", Exclusive, never), tok(2))
		}, porcupine.Illegal},
		{"a token not above the last", func(h *History) {
			at(h, 0, 0, 1, acquire("a", Exclusive, never), tok(5))
			at(h, 0, 2, 3, release("a"), ok)
			at(h, 1, 4, 5, acquire("b", Exclusive, never), tok(5))
		}, porcupine.Illegal},
		{"refused while free", func(h *History) {
			at(h, 0, 0, 1, acquire("a", Exclusive, never), refused)
		}, porcupine.Illegal},
		{"an unknown acquisition may hold, then end at any moment", func(h *History) {
			at(h, 0, 0, 1, acquire("a", Exclusive, never), unknown)
			at(h, 1, 2, 3, acquire("b", Exclusive, never), refused)
			at(h, 1, 4, 5, acquire("c", Exclusive, never), tok(1))
		}, porcupine.Ok},
		// A hold in doubt that ends by a bound (Until): a grant given back,
		// or gone with its TTL. Permits, which nothing else forces out.
		{"a permit in doubt bars another until its bound", func(h *History) {
			at(h, 0, 0, 1, LeaseOp{Op: Acquire, Owner: "a", Mode: Permit, Until: 10e6}, unknown)
			at(h, 1, 2, 3, acquire("b", Permit, never), tok(1))
			at(h, 2, 5, 6, acquire("c", Permit, never), refused)
		}, porcupine.Ok},
		{"a permit in doubt bars nothing past its bound", func(h *History) {
			at(h, 0, 0, 1, LeaseOp{Op: Acquire, Owner: "a", Mode: Permit, Until: 10e6}, unknown)
			at(h, 1, 2, 3, acquire("b", Permit, never), tok(1))
			at(h, 2, 11, 12, acquire("c", Permit, never), refused)
		}, porcupine.Illegal},
		// What the classic flaws leave in a history: a release that deleted
		// another's hold (GET, then DEL after the key expired and b took
		// it), so that c gets the lock while b's lease counts.
		{"a release that deleted the next holder's hold", func(h *History) {
			at(h, 0, 0, 1, acquire("a", Exclusive, 10), tok(1))
			at(h, 1, 11, 12, acquire("b", Exclusive, never), tok(2))
			at(h, 0, 9, 13, release("a"), ok)
			at(h, 2, 14, 15, acquire("c", Exclusive, never), tok(3))
		}, porcupine.Illegal},
		{"an extend confirmed for a hold another took", func(h *History) {
			at(h, 0, 0, 1, acquire("a", Exclusive, 10), tok(1))
			at(h, 1, 11, 12, acquire("b", Exclusive, never), tok(2))
			at(h, 0, 13, 14, extend("a"), ok)
		}, porcupine.Illegal},
		{"an unlock refused for a hold that lasts", func(h *History) {
			at(h, 0, 0, 1, acquire("a", Exclusive, never), tok(1))
			at(h, 0, 2, 3, release("a"), refused)
		}, porcupine.Illegal},
		{"readers share, a writer waits for them", func(h *History) {
			at(h, 0, 0, 1, acquire("r1", Shared, never), tok(1))
			at(h, 1, 2, 3, acquire("r2", Shared, never), tok(2))
			at(h, 2, 4, 5, acquire("w", Exclusive, never), refused)
			at(h, 0, 6, 7, release("r1"), ok)
			at(h, 1, 8, 9, release("r2"), ok)
			at(h, 2, 10, 11, acquire("w", Exclusive, never), tok(3))
		}, porcupine.Ok},
		{"a writer beside a reader", func(h *History) {
			at(h, 0, 0, 1, acquire("r", Shared, never), tok(1))
			at(h, 1, 2, 3, acquire("w", Exclusive, never), tok(2))
		}, porcupine.Illegal},
		{"two permits of two, a third refused", func(h *History) {
			at(h, 0, 0, 1, acquire("p1", Permit, never), tok(1))
			at(h, 1, 2, 3, acquire("p2", Permit, never), tok(2))
			at(h, 2, 4, 5, acquire("p3", Permit, never), refused)
		}, porcupine.Ok},
		{"three permits of two", func(h *History) {
			at(h, 0, 0, 1, acquire("p1", Permit, never), tok(1))
			at(h, 1, 2, 3, acquire("p2", Permit, never), tok(2))
			at(h, 2, 4, 5, acquire("p3", Permit, never), tok(3))
		}, porcupine.Illegal},
	})
}

// A hold the model takes to have lapsed for an operation that may take
// effect late is gone only from its lapse on: an operation that ended
// before then cannot be placed after it.
func TestLeaseModel_ALapseSeenByALateOperationBindsThoseAfterIt(t *testing.T) {
	acquire := func(owner string, lapseMs int64) LeaseOp {
		return LeaseOp{Op: Acquire, Owner: owner, Mode: Exclusive, Lapse: lapseMs * 1e6}
	}
	checkCases(t, LeaseModel(1), []historyCase{
		{"a second holder before the first's deadline, beside a long call of unknown outcome", func(h *History) {
			at(h, 0, 0, 1, acquire("a", 100), tok(1))
			at(h, 1, 2, 500, acquire("u", 1<<40), unknown)
			at(h, 2, 10, 11, acquire("b", 1<<40), tok(2))
		}, porcupine.Illegal},
	})
}
