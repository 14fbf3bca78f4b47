//go:build faults

package faults

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock/faults/linear"
)

// newTestChild is a child with no process: its lines are fed by hand.
func newTestChild(ops []op, stores *fencedStores) *child {
	s := &schedule{params: params{Seed: 1, Clients: 1, Ops: len(ops), Faults: []string{"child"}}, ops: [][]op{nil, ops}, process: []int{0, 1}}
	s.child = &childRun{client: 1, process: 1}
	return newChild(s, stores, &leaseRecorder{start: time.Now()})
}

func (c *child) feed(format string, args ...any) {
	c.handle(strings.Fields(fmt.Sprintf(format, args...)))
}

// TestChild_AKillEndsTheHoldAndMakesItsUnreadWriteLate: the parent's
// records of a child killed while it held, with a write in its pipe. The
// hold ends at the death (its deadline later), crashed, lapsing at the last
// deadline the child told (a renewal's, not the grant's); the write read
// after the kill is a stale write of that hold, refused by a store a later
// holder wrote to; the write read before it is not stale.
func TestChild_AKillEndsTheHoldAndMakesItsUnreadWriteLate(t *testing.T) {
	stores := &fencedStores{highest: map[string]uint64{}}
	c := newTestChild([]op{{Kind: "mutex", Names: []string{"m"}, TTL: time.Second, Hold: time.Second}}, stores)
	now := time.Now()
	ns := func(d time.Duration) int64 { return now.Add(d).UnixNano() }
	c.feed("asked 0 %d", ns(-300*time.Millisecond))
	c.feed("granted 0 %d %d 1 m=10", ns(-200*time.Millisecond), ns(800*time.Millisecond))
	c.feed("write 0 m 10 %d", ns(-200*time.Millisecond))
	c.feed("deadline 0 %d", ns(1500*time.Millisecond))
	c.died("held")
	c.feed("write 0 m 10 %d", ns(0))
	stores.write("m", 11) // the next holder's first write
	c.settle(t.Context())

	if len(c.holds) != 1 {
		t.Fatalf("holds %+v, want one", c.holds)
	}
	h := c.holds[0]
	if !h.crashed || !h.end.Equal(c.death) || h.tokens["m"] != 10 {
		t.Errorf("hold %+v: want crashed, ended at the death %v, token 10", h, c.death)
	}
	if len(h.stale) != 1 || h.stale[0].accepted || h.stale[0].token != 10 {
		t.Errorf("stale writes %+v: want the one read after the kill, refused", h.stale)
	}
	if c.counts["crash.child.latewrite"] != 1 || c.counts["crash.child.holding"] != 1 {
		t.Errorf("counts %v: want one late write, one kill while holding", c.counts)
	}
	if len(c.rec.calls) != 1 || !c.rec.calls[0].out.OK || c.rec.calls[0].lapse.UnixNano() != ns(1500*time.Millisecond) {
		t.Errorf("recorded %+v: want the acquisition, lapsing at the renewal's deadline", c.rec.calls)
	}
}

// TestChild_ACallCutShortIsOfUnknownOutcome: an acquire the child died in
// may take effect until a release hands the lock to its registration,
// three waiter refreshes after childApplied; an Unlock it died in, until
// childApplied. Neither is a refusal.
func TestChild_ACallCutShortIsOfUnknownOutcome(t *testing.T) {
	stores := &fencedStores{highest: map[string]uint64{}}
	lock := op{Kind: "mutex", Names: []string{"m"}, TTL: time.Second, Wait: time.Second}
	c := newTestChild([]op{lock}, stores)
	c.feed("asked 0 %d", time.Now().UnixNano())
	c.died("waiting")
	c.settle(t.Context())
	if len(c.rec.calls) != 1 || !c.rec.calls[0].out.Unknown || c.rec.calls[0].ret.Before(c.death.Add(childApplied(c.s)+registrationLife)) {
		t.Errorf("recorded %+v: want the acquire of unknown outcome, open until its registration expired", c.rec.calls)
	}
	if len(c.holds) != 0 || len(c.waits) != 0 || c.counts["crash.child.in-lock"] != 1 {
		t.Errorf("holds %v, waits %v, counts %v: want none, none, one kill in a Lock", c.holds, c.waits, c.counts)
	}

	c = newTestChild([]op{lock}, stores)
	now := time.Now()
	c.feed("asked 0 %d", now.UnixNano())
	c.feed("granted 0 %d %d 1 m=20", now.UnixNano(), now.Add(time.Second).UnixNano())
	c.feed("write 0 m 20 %d", now.UnixNano())
	c.feed("end 0 %d %d 0", now.UnixNano(), now.Add(time.Second).UnixNano())
	c.feed("unlocking 0 %d", now.UnixNano())
	c.died("sending")
	c.settle(t.Context())
	var release *leaseCall
	for i, call := range c.rec.calls {
		if call.op.Op == linear.Release {
			release = &c.rec.calls[i]
		}
	}
	if release == nil || !release.out.Unknown || release.ret.Before(c.death.Add(childApplied(c.s))) {
		t.Errorf("recorded %+v: want the Unlock of unknown outcome until childApplied after the death", c.rec.calls)
	}
	if len(c.holds) != 1 || c.holds[0].crashed || c.counts["crash.child.in-unlock"] != 1 || c.counts["crash.child.mid-script"] != 1 {
		t.Errorf("holds %+v, counts %v: want the hold ended before the kill, one kill mid-script in an Unlock", c.holds, c.counts)
	}
}

// TestChild_TheStopIsPlacedByTime: a stop that came on one grant may
// catch a later step, the lines read since being older than the child:
// the hold that was open during it is frozen (its loss and Unlock are not
// judged), one that ended before it is not, and a wait it caught is not
// judged either.
func TestChild_TheStopIsPlacedByTime(t *testing.T) {
	stores := &fencedStores{highest: map[string]uint64{}}
	lock := op{Kind: "mutex", Names: []string{"m"}, TTL: time.Second, Wait: time.Second}
	c := newTestChild([]op{lock, lock, lock}, stores)
	t0 := time.Now()
	at := func(ms int) int64 { return t0.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	c.stopped = []time.Time{t0.Add(100 * time.Millisecond), t0.Add(200 * time.Millisecond)}
	c.feed("asked 0 %d", at(0))
	c.feed("granted 0 %d %d 1 m=1", at(10), at(1010))
	c.feed("end 0 %d %d 0", at(50), at(1010))
	c.feed("asked 1 %d", at(60))
	c.feed("granted 1 %d %d 1 m=2", at(70), at(1070))
	c.feed("end 1 %d %d 1", at(300), at(1070))
	c.feed("asked 2 %d", at(150))
	c.feed("refused 2 %d notacquired", at(400))
	if len(c.holds) != 2 || c.holds[0].frozen || !c.holds[1].frozen {
		t.Errorf("holds %+v: want the first not frozen, the second (open during the stop) frozen", c.holds)
	}
	if len(c.waits) != 0 {
		t.Errorf("waits %+v: want none judged, the stop caught it", c.waits)
	}
}

// TestCheckHolds_AStaleWriteIsJudgedFromWhenTheLaterHoldersWriteArrived:
// a fenced store can refuse a stale token only once it saw a later one.
// A frozen holder's write that lands after the child took the lock, but
// before the child's write reached the store (the parent reads it from
// the child's pipe), is accepted rightly: no violation (a 24-lane soak
// flagged two such runs, seeds 1795699141901283610 and
// 1795699141901283647, each a frozen in-process holder against the
// child). Once the later holder's write arrived first, the acceptance is
// a violation.
func TestCheckHolds_AStaleWriteIsJudgedFromWhenTheLaterHoldersWriteArrived(t *testing.T) {
	now := time.Now()
	at := func(ms int) time.Time { return now.Add(time.Duration(ms) * time.Millisecond) }
	judge := func(childFenced time.Time) []string {
		frozen := hold{client: 0, kind: "mutex", tokens: map[string]uint64{"m": 10}, start: at(0), fenced: at(0), end: at(300), frozen: true,
			stale: []staleWrite{{client: 0, name: "m", token: 10, at: at(500), accepted: true}}}
		child := hold{client: 1, kind: "mutex", tokens: map[string]uint64{"m": 11}, start: at(400), fenced: childFenced, end: at(900)}
		s := &schedule{params: params{Seed: 1, Clients: 2, Faults: []string{"freeze", "child"}}}
		out := &outcome{params: s.params, injected: map[string]int{}}
		checkHolds(s, []hold{frozen, child}, nil, out)
		return out.violations
	}
	if v := judge(at(520)); len(v) != 0 {
		t.Errorf("the child's write reached the store after the stale one: %v, want no violation", v)
	}
	if v := judge(time.Time{}); len(v) != 0 {
		t.Errorf("the child never wrote: %v, want no violation", v)
	}
	if v := judge(at(450)); len(v) != 1 || !strings.HasPrefix(v[0], "stale accepted") {
		t.Errorf("the child's write reached the store first: %v, want stale accepted", v)
	}
}

// TestCheckHolds_AStaleWriteIsJudgedAgainstAHoldMintedAfter: a reader's
// write after its loss, accepted after another reader's, is no violation
// when that reader asked before it ended, so may have been granted first
// with the lower token, its call returning later (a soak flagged one, seed
// 1795732968650196478: the child, a reader killed holding, its last write
// with token …824 against client 10's …645); nor against a writer in a
// run whose faults document overlaps (FLUSHALL: seed
// 1795734994283030291). Against a reader that asked after it ended, or a
// writer that took the lock after it, it is.
func TestCheckHolds_AStaleWriteIsJudgedAgainstAHoldMintedAfter(t *testing.T) {
	now := time.Now()
	at := func(ms int) time.Time { return now.Add(time.Duration(ms) * time.Millisecond) }
	judge := func(laterKind string, asked int, faults ...string) []string {
		reader := hold{client: 0, kind: "rw.read", tokens: map[string]uint64{"rw": 11}, asked: at(0), start: at(0), fenced: at(0), end: at(300), crashed: true,
			stale: []staleWrite{{client: 0, name: "rw", token: 11, at: at(500), accepted: true}}}
		later := hold{client: 1, kind: laterKind, tokens: map[string]uint64{"rw": 10}, asked: at(asked), start: at(400), fenced: at(450), end: at(900)}
		s := &schedule{params: params{Seed: 1, Clients: 2, Faults: append([]string{"child"}, faults...)}}
		out := &outcome{params: s.params, injected: map[string]int{}}
		checkHolds(s, []hold{reader, later}, nil, out)
		return out.violations
	}
	stale := func(v []string) bool {
		return slices.ContainsFunc(v, func(v string) bool { return strings.HasPrefix(v, "stale accepted") })
	}
	if v := judge("rw.read", -100); stale(v) {
		t.Errorf("a reader that asked before, returned later: %v, want no stale write", v)
	}
	if v := judge("rw.read", 350); !stale(v) {
		t.Errorf("a reader that asked after the loss: %v, want stale accepted", v)
	}
	if v := judge("rw.write", -100, "flushall"); stale(v) {
		t.Errorf("a writer that asked before, in a run whose FLUSHALL documents overlaps: %v, want no stale write", v)
	}
	if v := judge("rw.write", -100); !stale(v) {
		t.Errorf("a writer that took the lock after the reader lost it: %v, want stale accepted", v)
	}
}

// TestChild_AWriteReachesTheStoreWhenTheParentHandlesIt: the parent
// reads the child's lines on one goroutine and handles them on another,
// which a stop holds up (follow sleeps through the SIGSTOP, 1.5 TTLs and
// more): a write read before the stop reaches the fenced store only once
// handled, after it. A frozen holder's stale write that lands meanwhile
// is accepted rightly, and the child's hold counts as fenced from the
// handling, not the reading (seed 1795708793282321008 of a soak: the
// child stopped 3.7 s on its grant of sem0, a frozen in-process holder's
// write accepted 0.24 s into the stop, judged "stale accepted").
func TestChild_AWriteReachesTheStoreWhenTheParentHandlesIt(t *testing.T) {
	stores := &fencedStores{highest: map[string]uint64{}}
	c := newTestChild([]op{{Kind: "semaphore", Names: []string{"s"}, TTL: time.Second, Wait: time.Second, Hold: 100 * time.Millisecond}}, stores)
	c.s.Faults = []string{"freeze", "child"}
	t0 := time.Now()
	ns := func(ms int) int64 { return t0.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	stores.write("s", 10) // the frozen holder's first write
	frozen := hold{client: 0, kind: "semaphore", tokens: map[string]uint64{"s": 10}, start: at(-1000), fenced: at(-1000), end: at(-310), frozen: true}
	c.feed("asked 0 %d", ns(-800))
	c.feed("granted 0 %d %d 1 s=11", ns(-300), ns(700))
	// The write's line was read at once (-300 ms); then the parent slept
	// through the stop, and the frozen holder woke and wrote.
	frozen.stale = []staleWrite{{client: 0, name: "s", token: 10, at: at(-100), accepted: stores.write("s", 10)}}
	handled := time.Now()
	c.feed("write 0 s 11 %d", ns(-300))
	c.feed("end 0 %d %d 0", ns(-200), ns(700))
	if len(c.holds) != 1 {
		t.Fatalf("holds %+v: want the child's", c.holds)
	}
	if c.holds[0].fenced.Before(handled) {
		t.Errorf("hold %+v: want the child's, fenced once its write was handled (%v), not when it was read (%v)", c.holds[0], handled, at(-300))
	}
	out := &outcome{params: c.s.params, injected: map[string]int{}}
	checkHolds(c.s, []hold{frozen, c.holds[0]}, nil, out)
	if len(out.violations) != 0 {
		t.Errorf("the child's write reached the store after the stale one: %v, want no violation", out.violations)
	}
}
