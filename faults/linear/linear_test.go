package linear

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Each model must accept what a correct lock does and flag each way a
// broken one goes wrong. Times are in milliseconds here.

// at records an operation that ran from call to ret milliseconds.
func at(h *History, client int, call, ret int64, in interface{}, out Result) {
	h.add(client, call*1e6, ret*1e6, in, out)
}

var (
	ok      = Result{OK: true}
	refused = Result{}
	unknown = Result{Unknown: true}
)

func tok(n uint64) Result { return Result{OK: true, Token: n} }

type historyCase struct {
	name string
	ops  func(h *History)
	want porcupine.CheckResult
}

func checkCases(t *testing.T, model porcupine.NondeterministicModel, cases []historyCase) {
	t.Helper()
	for _, tc := range cases {
		var h History
		tc.ops(&h)
		if got := h.Linearizable(model, time.Minute); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFencedMutexModel(t *testing.T) {
	acquire := func(owner string) MutexOp { return MutexOp{Op: Acquire, Owner: owner} }
	release := func(owner string) MutexOp { return MutexOp{Op: Release, Owner: owner} }
	checkCases(t, FencedMutexModel, []historyCase{
		{"one holder after another", func(h *History) {
			at(h, 0, 0, 1, acquire("a"), tok(1))
			at(h, 1, 2, 3, acquire("b"), refused)
			at(h, 0, 4, 5, release("a"), ok)
			at(h, 1, 6, 7, acquire("b"), tok(2))
			at(h, 0, 8, 9, release("a"), refused) // a's second release is refused
		}, porcupine.Ok},
		{"two holders at once", func(h *History) {
			at(h, 0, 0, 1, acquire("a"), tok(1))
			at(h, 1, 2, 3, acquire("b"), tok(2))
		}, porcupine.Illegal},
		{"a token not above the last", func(h *History) {
			at(h, 0, 0, 1, acquire("a"), tok(5))
			at(h, 0, 2, 3, release("a"), ok)
			at(h, 1, 4, 5, acquire("b"), tok(5))
		}, porcupine.Illegal},
		{"a release by a non-holder that succeeds", func(h *History) {
			at(h, 0, 0, 1, acquire("a"), tok(1))
			at(h, 1, 2, 3, release("b"), ok)
		}, porcupine.Illegal},
		{"overlapping calls ordered either way", func(h *History) {
			at(h, 0, 0, 10, acquire("a"), tok(2))
			at(h, 1, 1, 9, acquire("b"), refused)
		}, porcupine.Ok},
		{"an acquisition refused while free", func(h *History) {
			at(h, 0, 0, 1, acquire("a"), refused)
		}, porcupine.Illegal},
		{"an acquisition of unknown outcome, cleared", func(h *History) {
			at(h, 0, 0, 1, acquire("a"), unknown)
			at(h, 1, 2, 3, acquire("b"), tok(2))
		}, porcupine.Ok},
	})
	// The same histories, unfenced, let a repeated token through.
	var h History
	at(&h, 0, 0, 1, acquire("a"), tok(5))
	at(&h, 0, 2, 3, release("a"), ok)
	at(&h, 1, 4, 5, acquire("b"), tok(5))
	if got := h.Linearizable(OwnerMutexModel, time.Minute); got != porcupine.Ok {
		t.Errorf("OwnerMutexModel on a repeated token: %v; it does not check tokens", got)
	}
}

func TestMutexModels_HoldsExpire(t *testing.T) {
	const ttl = 100 * time.Millisecond
	acquire := func(owner string) MutexOp { return MutexOp{Op: Acquire, Owner: owner, TTL: ttl} }
	release := func(owner string) MutexOp { return MutexOp{Op: Release, Owner: owner} }
	extend := func(owner string) MutexOp { return MutexOp{Op: Extend, Owner: owner, TTL: ttl} }
	checkCases(t, FencedMutexModel, []historyCase{
		{"another owner after the TTL", func(h *History) {
			at(h, 0, 0, 1, acquire("a"), tok(1))
			at(h, 1, 150, 151, acquire("b"), tok(2))
			at(h, 0, 152, 153, release("a"), refused)
		}, porcupine.Ok},
		{"another owner before the TTL", func(h *History) {
			at(h, 0, 0, 1, acquire("a"), tok(1))
			at(h, 1, 50, 51, acquire("b"), tok(2))
		}, porcupine.Illegal},
		{"a hold refused after the TTL", func(h *History) {
			at(h, 0, 0, 1, acquire("a"), tok(1))
			at(h, 1, 150, 151, acquire("b"), refused)
		}, porcupine.Illegal},
		{"a release by the holder refused before the TTL", func(h *History) {
			at(h, 0, 0, 1, acquire("a"), tok(1))
			at(h, 0, 50, 51, release("a"), refused)
		}, porcupine.Illegal},
		{"an extension keeps the hold", func(h *History) {
			at(h, 0, 0, 1, acquire("a"), tok(1))
			at(h, 0, 80, 81, extend("a"), ok)
			at(h, 1, 150, 151, acquire("b"), refused)
			at(h, 0, 152, 153, release("a"), ok)
		}, porcupine.Ok},
		{"an extension after the TTL that succeeds", func(h *History) {
			at(h, 0, 0, 1, acquire("a"), tok(1))
			at(h, 1, 150, 151, acquire("b"), tok(2))
			at(h, 1, 152, 153, release("b"), ok)
			at(h, 0, 154, 155, extend("a"), ok) // resurrected
		}, porcupine.Illegal},
		{"a call that straddles the expiry goes either way", func(h *History) {
			at(h, 0, 0, 1, acquire("a"), tok(1))
			at(h, 1, 90, 110, acquire("b"), tok(2))
		}, porcupine.Ok},
		{"an unknown acquisition may block others until its TTL", func(h *History) {
			at(h, 0, 0, 1, acquire("a"), unknown)
			at(h, 1, 50, 51, acquire("b"), refused)
			at(h, 1, 150, 151, acquire("b"), tok(2))
		}, porcupine.Ok},
		{"but not after it", func(h *History) {
			at(h, 0, 0, 1, acquire("a"), unknown)
			at(h, 1, 150, 151, acquire("b"), refused)
		}, porcupine.Illegal},
		{"an unknown acquisition given back by its abandon", func(h *History) {
			at(h, 0, 0, 40, acquire("a"), unknown) // others see it held, then free
			at(h, 1, 10, 11, acquire("b"), refused)
			at(h, 1, 20, 21, acquire("b"), tok(2))
		}, porcupine.Ok},
		{"a lapse a long call saw does not free the lock for a call that ended before it", func(h *History) {
			at(h, 0, 0, 1, acquire("a"), tok(1))
			// A refused release that returned after the TTL may have
			// taken effect after the hold lapsed ...
			at(h, 0, 5, 500, release("a"), refused)
			// ... but not b's acquisition, over before the hold could lapse:
			// whatever the order, b took a held lock.
			at(h, 1, 10, 20, acquire("b"), tok(2))
		}, porcupine.Illegal},
	})
}

func TestReentrantMutexModel(t *testing.T) {
	op := func(k Kind, owner string, hold int) ReentrantOp { return ReentrantOp{Op: k, Owner: owner, Hold: hold} }
	checkCases(t, ReentrantMutexModel, []historyCase{
		{"nested holds share the token, free at the last release", func(h *History) {
			at(h, 0, 0, 1, op(Acquire, "a", 0), tok(1))
			at(h, 0, 2, 3, op(Acquire, "a", 1), tok(1))
			at(h, 1, 4, 5, op(Acquire, "b", 0), refused)
			at(h, 0, 6, 7, op(Release, "a", 1), ok)
			at(h, 0, 8, 9, op(Release, "a", 1), refused) // twice the same hold
			at(h, 1, 10, 11, op(Acquire, "b", 0), refused)
			at(h, 0, 12, 13, op(Release, "a", 0), ok)
			at(h, 1, 14, 15, op(Acquire, "b", 0), tok(2))
		}, porcupine.Ok},
		{"a nested hold with a new token", func(h *History) {
			at(h, 0, 0, 1, op(Acquire, "a", 0), tok(1))
			at(h, 0, 2, 3, op(Acquire, "a", 1), tok(2))
		}, porcupine.Illegal},
		{"free after the first of two releases", func(h *History) {
			at(h, 0, 0, 1, op(Acquire, "a", 0), tok(1))
			at(h, 0, 2, 3, op(Acquire, "a", 1), tok(1))
			at(h, 0, 4, 5, op(Release, "a", 1), ok)
			at(h, 1, 6, 7, op(Acquire, "b", 0), tok(2))
		}, porcupine.Illegal},
		{"one hold released twice", func(h *History) {
			at(h, 0, 0, 1, op(Acquire, "a", 0), tok(1))
			at(h, 0, 2, 3, op(Acquire, "a", 1), tok(1))
			at(h, 0, 4, 5, op(Release, "a", 1), ok)
			at(h, 0, 6, 7, op(Release, "a", 1), ok)
		}, porcupine.Illegal},
	})
}

func TestRWMutexModel(t *testing.T) {
	op := func(k Kind, write bool, client int) RWOp { return RWOp{Op: k, Write: write, Client: client} }
	const r, w = false, true
	checkCases(t, RWMutexModel, []historyCase{
		{"readers together, then a writer", func(h *History) {
			at(h, 0, 0, 1, op(Acquire, r, 0), tok(1))
			at(h, 1, 2, 3, op(Acquire, r, 1), tok(2))
			at(h, 2, 4, 5, op(Acquire, w, 2), refused)
			at(h, 0, 6, 7, op(Release, r, 0), ok)
			at(h, 1, 8, 9, op(Release, r, 1), ok)
			at(h, 2, 10, 11, op(Acquire, w, 2), tok(3))
			at(h, 0, 12, 13, op(Acquire, r, 0), refused)
		}, porcupine.Ok},
		{"a writer while a reader holds", func(h *History) {
			at(h, 0, 0, 1, op(Acquire, r, 0), tok(1))
			at(h, 1, 2, 3, op(Acquire, w, 1), tok(2))
		}, porcupine.Illegal},
		{"a reader while a writer holds", func(h *History) {
			at(h, 0, 0, 1, op(Acquire, w, 0), tok(1))
			at(h, 1, 2, 3, op(Acquire, r, 1), tok(2))
		}, porcupine.Illegal},
		{"a read refused among readers", func(h *History) {
			at(h, 0, 0, 1, op(Acquire, r, 0), tok(1))
			at(h, 1, 2, 3, op(Acquire, r, 1), refused)
		}, porcupine.Illegal},
		{"a writer's token below a reader's", func(h *History) {
			at(h, 0, 0, 1, op(Acquire, r, 0), tok(4))
			at(h, 0, 2, 3, op(Release, r, 0), ok)
			at(h, 1, 4, 5, op(Acquire, w, 1), tok(3))
		}, porcupine.Illegal},
	})
}

func TestSemaphoreModel(t *testing.T) {
	op := func(k Kind, client int) SemaphoreOp { return SemaphoreOp{Op: k, Client: client} }
	checkCases(t, SemaphoreModel(2), []historyCase{
		{"two permits, a third refused until one returns", func(h *History) {
			at(h, 0, 0, 1, op(Acquire, 0), tok(1))
			at(h, 1, 2, 3, op(Acquire, 1), tok(2))
			at(h, 2, 4, 5, op(Acquire, 2), refused)
			at(h, 1, 6, 7, op(Release, 1), ok)
			at(h, 1, 8, 9, op(Release, 1), refused)
			at(h, 2, 10, 11, op(Acquire, 2), tok(3))
		}, porcupine.Ok},
		{"three holders of two permits", func(h *History) {
			at(h, 0, 0, 1, op(Acquire, 0), tok(1))
			at(h, 1, 2, 3, op(Acquire, 1), tok(2))
			at(h, 2, 4, 5, op(Acquire, 2), tok(3))
		}, porcupine.Illegal},
		{"refused with a permit free", func(h *History) {
			at(h, 0, 0, 1, op(Acquire, 0), tok(1))
			at(h, 1, 2, 3, op(Acquire, 1), refused)
		}, porcupine.Illegal},
		{"a permit returned by one who had none", func(h *History) {
			at(h, 0, 0, 1, op(Acquire, 0), tok(1))
			at(h, 1, 2, 3, op(Release, 1), ok)
		}, porcupine.Illegal},
	})
}

func TestExplain_NamesWhereAHistoryStopsBeingExplicable(t *testing.T) {
	var h History
	at(&h, 0, 0, 1, MutexOp{Op: Acquire, Owner: "a"}, tok(1))
	at(&h, 1, 2, 3, MutexOp{Op: Acquire, Owner: "b"}, tok(2)) // a second holder
	got := h.Explain(FencedMutexModel)
	for _, want := range []string{"longest linearization: 1 of 2", "not placed after it:", "acquire by b"} {
		if !strings.Contains(got, want) {
			t.Errorf("Explain lacks %q:\n%s", want, got)
		}
	}
}
