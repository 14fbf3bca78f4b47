//go:build faults

package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/faults/linear"
)

// The child fault: a client in a process of its own, killed for real.
//
// The crash fault (explore_crash_test.go) kills a process inside the test
// process, which is the same from Redis's side. Here the test binary runs
// again as a child (childEnv selects its role, as holderEnv does for
// TestScenario04; its side is explore_child_proc_test.go), with a dlock
// Client of its own on connections of its own, and loops over operations
// drawn as an in-process client's are, on the run's lock names (every
// kind but the Redlock). It reports each step
// on its stdout, a line each, with times from its own clock (the machine's
// wall clock, which the parent shares):
//
//	sending C           a command C (or "pipeline C") is about to be sent
//	asked I T           operation I's acquire call began at T
//	granted I T D V N=K,... it returned a lease at T, deadline D, valid V (1/0), tokens
//	refused I T E       it returned the errors E (see childErrors) at T
//	write I N K T       a write to the fenced store of N with token K, made at T
//	deadline I D        the lease's deadline moved to D (a renewal, an Extend)
//	extending I T       Lease.Extend called at T
//	extended I T E      it returned E at T
//	end I T D L         the hold ended at T (before Unlock), deadline D, lost L (1/0)
//	unlocking I T       Unlock called at T
//	unlocked I N T E    the Nth Unlock (1 or 2) returned E at T
//	done                every operation made
//
// The parent reads the lines as they come and makes of them what an
// in-process client records: holds, failed waits, the porcupine history,
// writes to the run's fenced stores (a write arrives at the store when
// the parent handles its line, which a stop holds up). Then every checker
// judges the child's holds as any other's. At a moment drawn from a
// stream of its own, the parent sends SIGKILL: right after a "sending" line of a script call (with a
// small random delay: the command may not have reached Redis, or Redis
// applied it and the child never read the reply), while it holds, while
// it waits in a Lock, or at a time. Sometimes, before that, it stops the
// child (SIGSTOP) past its hold's TTL and lets it run again (SIGCONT): a
// frozen process, which then writes with its token without looking.
//
// What a SIGKILL leaves: what the child wrote to its stdout before it
// died, which the parent reads after the kill (writes among it are late
// writes: with childKill.LateWrite they reach the store only once the
// dead child's claim has run out, and must be refused if anyone held the
// lock since); a call it had made and not heard back from, of unknown
// outcome (applied up to childApplied after the death, or for an acquire
// the dead waiter may be handed the lock until its registration expires);
// its holds, ended at its death, lapsing at the last deadline it
// reported. The death is a crash of the schedule (crash.Child), so
// checkCrashes judges the waiters on its locks with the dead claim's
// bound, and the orphan and liveness checks run once its claims ran out.

// childEnv, when set, makes the test binary the explored child: a JSON
// childSpec.
const childEnv = "DLOCK_FAULTS_EXPLORE_CHILD"

// childStream is the key of the stream the child fault is drawn from:
// under it, no CI seed draws one (TestExplore_ChildKeepsTheCISchedules).
const childStream = 0xc43e

// childRate: a child comes in one run in childRate that has no failover
// (whose clients follow a Sentinel; the child does not).
const childRate = 5

// drawChild draws whether the run has a child process, from a stream of
// its own, so every seed keeps the schedule it had without it.
func (p *params) drawChild(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, childStream))
	if rng.IntN(childRate) == 0 && !p.has("failover") && !p.failsOverCluster() {
		p.Faults = append(p.Faults, "child")
	}
}

// childKill is how the parent kills the child.
type childKill struct {
	At        time.Duration // after the run's start, the kill waits for its moment
	When      string        // the moment: "sending", "held", "waiting" or "at" (At itself)
	Delay     time.Duration // after a sending or granted line; for waiting, how long the Lock has waited
	LateWrite bool          // writes read after the kill reach the store once the dead claim ran out
	// StopAt, if not 0: on the first grant after it (and before the kill),
	// the child is stopped past the hold's TTL, then let run.
	StopAt time.Duration
}

// childRun is a run's child: its client and process numbers in the
// schedule (after the in-process ones), and its kill.
type childRun struct {
	client, process int
	kill            childKill
}

// childKinds are the kinds a child uses: all but the Redlock, whose
// masters are the explorer's own.
func childKinds(kinds []string) []string {
	return slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return k == "redlock" })
}

// drawChildRun adds the child's operations to s (as client s.Clients, in
// a process of its own) and its death to s's crashes, from a stream of its
// own. Its holds are longer than most (one in two 0.1–0.8 s), so that a
// kill finds it holding, renewing, waited for.
func drawChildRun(s *schedule) *childRun {
	kinds := childKinds(s.Kinds)
	if !s.has("child") || s.has("failover") || len(kinds) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(s.Seed, childStream+1))
	c := &childRun{client: len(s.ops), process: slices.Max(s.process) + 1}
	view := *s
	view.Kinds = kinds
	var ops []op
	for range s.Ops + 4 {
		o := view.randomOp(rng)
		o.Freeze = false // its freeze is a SIGSTOP
		if rng.IntN(2) == 0 {
			o.Hold = time.Duration(100+rng.IntN(700)) * time.Millisecond
		}
		ops = append(ops, o)
	}
	k := &c.kill
	k.At = time.Duration(100+rng.IntN(2000)) * time.Millisecond
	k.When = []string{"sending", "sending", "held", "waiting", "at"}[rng.IntN(5)]
	switch k.When {
	case "sending":
		if rng.IntN(2) == 0 { // else at once: reading the line takes about a loopback round trip
			k.Delay = time.Duration(rng.IntN(300)) * time.Microsecond
		}
	case "held":
		k.Delay = time.Duration(rng.IntN(20)) * time.Millisecond
	case "waiting":
		k.Delay = time.Duration(20+rng.IntN(400)) * time.Millisecond
	}
	k.LateWrite = rng.IntN(2) == 0
	if rng.IntN(3) == 0 {
		k.StopAt = time.Duration(rng.IntN(int(k.At/time.Millisecond))) * time.Millisecond
	}
	s.ops = append(s.ops, ops)
	s.process = append(s.process, c.process)
	s.crashes = append(s.crashes, crash{Process: c.process, At: k.At, LateWrite: k.LateWrite, Child: true})
	return c
}

// childWaitsFor is how long after its moment a kill waits at most: then
// it kills wherever the child is.
const childWaitsFor = time.Second

// childApplied is how long after the child's death a command it had sent
// may still be applied: Redis reads what the dead child's socket held
// when it gets to it (after a pause, once resumed). An acquire may take
// effect later still: a Mutex or FairMutex release hands the lock to a
// waiter's registration until it expires (three waiter refreshes).
func childApplied(s *schedule) time.Duration {
	if s.has("pause") {
		return 250*time.Millisecond + time.Second // the longest pause, 850 ms
	}
	return 250 * time.Millisecond
}

// child is the parent's side of a run's child.
type child struct {
	run    *childRun
	s      *schedule
	proc   *process // its death, for checkCrashes and waitCrashedOut
	stores *fencedStores
	rec    *leaseRecorder
	cmd    *exec.Cmd
	stderr bytes.Buffer
	start  time.Time
	done   chan struct{}

	// What the child did, as the in-process clients' records.
	holds   []hold
	waits   []failedWait
	unlocks []string // Unlocks judged wrong, as runOp's notes
	errs    []string // the harness's: the child failed to run
	notes   []string
	counts  map[string]int

	ops      []childOpState
	cur      int  // the operation under way; -1 before the first
	finished bool // it said "done"
	killed   bool
	death    time.Time
	trigger  string // the moment the kill came at: sending, held, waiting or at
	// wroteAfterTrigger: after the line the kill came on, the child wrote
	// a line other than "sending" before it died.
	wroteAfterTrigger bool
	stopped           []time.Time // each stop's start and end
	lateWrites        []lateChildWrite
}

// childOpState is one operation as the parent followed it.
type childOpState struct {
	asked, granted  time.Time
	answered, ended bool
	h               *hold
	deadline        time.Time // the latest the child told
	extending       time.Time // an Extend in flight
	unlocking       time.Time // an Unlock in flight
	unlocks         int
	writes          []childWrite // to the store, read before any kill
}

// childWrite is a write of the child's the store got.
type childWrite struct {
	staleWrite           // at: when the store got it
	made       time.Time // when the child made it, on its clock
}

// lateChildWrite is a write the parent read after the kill.
type lateChildWrite struct {
	op    int
	name  string
	token uint64
}

// newChild is the parent's side of s's child, before it starts.
func newChild(s *schedule, stores *fencedStores, rec *leaseRecorder) *child {
	return &child{run: s.child, s: s, proc: &process{crash: newCrashState()}, stores: stores, rec: rec, start: time.Now(),
		done: make(chan struct{}), counts: map[string]int{}, cur: -1, ops: make([]childOpState, len(s.ops[s.child.client]))}
}

// startChild starts the run's child, if it has one; nil if not. It adds
// the child's process to procs: dead once it is killed.
func startChild(ctx context.Context, env *exploreEnv, s *schedule, stores *fencedStores, rec *leaseRecorder, procs map[int]*process) *child {
	run := s.child
	if run == nil {
		return nil
	}
	c := newChild(s, stores, rec)
	procs[run.process] = c.proc
	spec := childSpec{Cluster: env.cluster, Ops: s.ops[run.client]}
	for _, n := range env.nodes {
		spec.Addrs = append(spec.Addrs, n.Addr())
	}
	if !env.cluster {
		spec.Addrs = spec.Addrs[:1]
	}
	js, _ := json.Marshal(spec)
	c.cmd = exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(js))
	c.cmd.Stderr = &c.stderr
	stdout, err := c.cmd.StdoutPipe()
	if err == nil {
		err = c.cmd.Start()
	}
	if err != nil {
		c.errs = append(c.errs, fmt.Sprintf("starting the child: %v", err))
		close(c.done)
		return c
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	go func() {
		defer close(c.done)
		c.follow(ctx, lines)
		_ = c.cmd.Wait()
		c.settle(ctx)
	}()
	return c
}

// follow reads the child's lines until its stdout closes, and kills (and
// stops) it when the schedule says.
func (c *child) follow(ctx context.Context, lines <-chan string) {
	k := c.run.kill
	armed := time.NewTimer(k.At)
	defer armed.Stop()
	fallback := time.NewTimer(k.At + childWaitsFor)
	defer fallback.Stop()
	var waited <-chan time.Time // a Lock's wait long enough to kill in
	isArmed := false
	ctxDone := ctx.Done()
	for {
		select {
		case <-ctxDone: // the run's time is up: the child dies, its lines are read
			c.kill("at")
			armed.Stop()
			ctxDone = nil
		case <-armed.C:
			isArmed = true
			if c.killed {
				continue
			}
			switch op := c.curOp(); {
			case k.When == "at":
				c.kill("at")
			case k.When == "held" && op != nil && op.h != nil && !op.ended:
				c.kill("held")
			case k.When == "waiting" && op != nil && !op.answered && !c.s.ops[c.run.client][c.cur].Try:
				waited = time.After(time.Until(op.asked.Add(k.Delay)))
			}
		case <-fallback.C:
			if !c.killed {
				c.kill("at")
			}
		case <-waited:
			waited = nil
			if !c.killed {
				c.kill("waiting")
			}
		case l, ok := <-lines:
			if !ok {
				return
			}
			fields := strings.Fields(l)
			if len(fields) == 0 {
				continue
			}
			c.handle(fields)
			if c.killed {
				c.wroteAfterTrigger = c.wroteAfterTrigger || fields[0] != "sending"
				continue
			}
			if k.StopAt > 0 && fields[0] == "granted" && time.Since(c.start) >= k.StopAt && len(c.stopped) == 0 {
				c.stop()
			}
			if !isArmed {
				continue
			}
			switch {
			case k.When == "sending" && fields[0] == "sending" && isScriptCall(fields[1:]):
				sleepPrecisely(k.Delay)
				c.kill("sending")
			case k.When == "held" && fields[0] == "granted":
				sleepPrecisely(k.Delay)
				c.kill("held")
			case k.When == "waiting" && fields[0] == "asked" && !c.s.ops[c.run.client][c.cur].Try:
				waited = time.After(k.Delay)
			case k.When == "waiting" && (fields[0] == "granted" || fields[0] == "refused"):
				waited = nil
			}
		}
	}
}

// isScriptCall: the command a "sending" line names is a script's (an
// acquire, renewal, release or abandon), or a pipeline of them.
func isScriptCall(cmd []string) bool {
	if len(cmd) > 0 && cmd[0] == "pipeline" {
		cmd = cmd[1:]
	}
	return len(cmd) > 0 && slices.Contains([]string{"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall"}, strings.ToLower(cmd[0]))
}

// sleepPrecisely sleeps d, however short.
func sleepPrecisely(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

func (c *child) curOp() *childOpState {
	if c.cur < 0 {
		return nil
	}
	return &c.ops[c.cur]
}

// kill sends SIGKILL; when says at what moment, for the counts.
func (c *child) kill(when string) {
	if c.killed {
		return
	}
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return // it had exited already
	}
	c.died(when)
}

// died records the child's death, now.
func (c *child) died(when string) {
	c.killed, c.death = true, time.Now()
	c.proc.crash.at, c.proc.crash.lateWrite = c.death, c.run.kill.LateWrite
	close(c.proc.crash.dead)
	close(c.proc.crash.gone)
	c.trigger = when
	c.counts["child"]++
}

// tellDeath counts and notes where the kill found the child, once every
// line it wrote before it died was read.
func (c *child) tellDeath() {
	state := "between operations"
	if op := c.curOp(); op != nil {
		o := c.s.ops[c.run.client][c.cur]
		switch {
		case op.h != nil && !op.ended:
			c.counts["crash.child.holding"]++
			state = fmt.Sprintf("holding %v for %v", op.h.tokens, c.death.Sub(op.granted).Round(time.Millisecond))
			if !op.extending.IsZero() {
				c.counts["crash.child.in-extend"]++
				state += ", in an Extend"
			}
		case !op.answered && !o.Try:
			c.counts["crash.child.in-lock"]++
			if c.death.Sub(op.asked) >= 50*time.Millisecond {
				c.counts["crash.child.waiting"]++ // past its first attempt, most likely
			}
			state = fmt.Sprintf("in a Lock of %v for %v", o.Names, c.death.Sub(op.asked).Round(time.Millisecond))
		case !op.answered:
			c.counts["crash.child.in-trylock"]++
			state = fmt.Sprintf("in a TryLock of %v", o.Names)
		case !op.unlocking.IsZero():
			c.counts["crash.child.in-unlock"]++
			state = "in an Unlock"
		}
	}
	// Killed right after a "sending" line, with nothing written after it:
	// it died within that call (its command not yet read by Redis, or
	// applied and its reply never read).
	if c.trigger == "sending" && !c.wroteAfterTrigger {
		c.counts["crash.child.mid-script"]++
		state += ", mid-script"
	}
	c.notes = append(c.notes, fmt.Sprintf("child: SIGKILL (%s, drawn %+v) %v into the run, op %d, %s",
		c.trigger, c.run.kill, c.death.Sub(c.start).Round(time.Millisecond), c.cur, state))
}

// stop freezes the child past its operation's TTL, as SIGSTOP does to a
// process, then lets it run. Its open hold is a frozen one.
func (c *child) stop() {
	o := c.s.ops[c.run.client][c.cur]
	d := max(o.TTL, o.Lease, o.Extend)*3/2 + 100*time.Millisecond
	if c.cmd.Process.Signal(syscall.SIGSTOP) != nil {
		return
	}
	from := time.Now()
	time.Sleep(d)
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	c.stopped = append(c.stopped, from, time.Now())
	c.counts["crash.child.stopped"]++
}

// stoppedWithin reports whether the child was stopped at some time in
// (from, to), and until when. The lines read since the grant the stop
// came on may be of later steps: which hold, wait or Unlock the stop
// caught is found by their times.
func (c *child) stoppedWithin(from, to time.Time) (until time.Time, ok bool) {
	for i := 0; i+1 < len(c.stopped); i += 2 {
		if c.stopped[i].Before(to) && c.stopped[i+1].After(from) {
			until, ok = c.stopped[i+1], true
		}
	}
	return until, ok
}

// childFields is how many fields each of the child's lines has.
var childFields = map[string]int{"asked": 3, "refused": 4, "granted": 6, "write": 5, "deadline": 3, "extending": 3,
	"extended": 4, "end": 5, "unlocking": 3, "unlocked": 5}

func childTime(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Unix(0, n)
}

// handle takes one line of the child's.
func (c *child) handle(f []string) {
	client := c.run.client
	ops := c.s.ops[client]
	if f[0] == "error" {
		c.errs = append(c.errs, "the child: "+strings.Join(f[1:], " "))
		return
	}
	if f[0] == "sending" {
		return
	}
	if f[0] == "done" {
		c.finished = true
		return
	}
	if want, ok := childFields[f[0]]; !ok || len(f) < want {
		c.errs = append(c.errs, fmt.Sprintf("the child said %q", strings.Join(f, " ")))
		return
	}
	i, err := strconv.Atoi(f[1])
	if err != nil || i < 0 || i >= len(ops) {
		c.errs = append(c.errs, fmt.Sprintf("the child said %q", strings.Join(f, " ")))
		return
	}
	o, op := ops[i], &c.ops[i]
	owner := fmt.Sprintf("client %d op %d", client, i)
	switch f[0] {
	case "asked":
		c.cur, op.asked = i, childTime(f[2])
	case "refused":
		op.answered = true
		ret, err := childTime(f[2]), parseChildErrors(f[3])
		c.rec.refused(client, owner, o, op.asked, ret, err)
		if _, stopped := c.stoppedWithin(op.asked, ret); !stopped { // a stopped process's wait is not judged
			c.waits = append(c.waits, failedWait{client: client, op: o, asked: op.asked, gaveUp: ret, err: err})
		}
	case "granted":
		op.answered = true
		op.granted, op.deadline = childTime(f[2]), childTime(f[3])
		h := &hold{client: client, kind: o.Kind, tokens: map[string]uint64{}, asked: op.asked, start: op.granted,
			fixed: o.Lease > 0 && o.Hold >= o.Lease/2, invalid: f[4] != "1"}
		for _, nt := range strings.Split(f[5], ",") {
			name, token, _ := strings.Cut(nt, "=")
			h.tokens[name], _ = strconv.ParseUint(token, 10, 64)
		}
		op.h = h
		if len(f) > 6 && f[6] == "1" { // it may have held the lock under no lease first
			c.rec.recordInDoubt(client, owner, o, op.asked, op.granted)
		}
	case "write":
		token, _ := strconv.ParseUint(f[3], 10, 64)
		if c.killed {
			c.lateWrites = append(c.lateWrites, lateChildWrite{op: i, name: f[2], token: token})
			return
		}
		// It reaches the store now, as it is handled: a stop (follow
		// sleeps through it) may hold up a line read long before.
		accepted := c.stores.write(f[2], token)
		w := staleWrite{client: client, name: f[2], token: token, at: time.Now(), accepted: accepted}
		op.writes = append(op.writes, childWrite{staleWrite: w, made: childTime(f[4])})
		if op.h != nil && op.h.fenced.IsZero() {
			op.h.fenced = w.at
		}
	case "deadline":
		if op.h != nil && !op.ended {
			op.deadline = childTime(f[2])
		}
	case "extending":
		op.extending = childTime(f[2])
	case "extended":
		c.rec.ended(client, owner, o, linear.Extend, op.extending, childTime(f[2]), parseChildErrors(f[3]))
		op.extending = time.Time{}
	case "end":
		op.ended = true
		h := op.h
		h.end, op.deadline = childTime(f[2]), childTime(f[3])
		h.lost = f[4] == "1"
		if _, stopped := c.stoppedWithin(op.granted, h.end); stopped {
			h.frozen = true
		}
		if until, stopped := c.stoppedWithin(op.asked, op.granted); stopped {
			h.asked = until // it waited from then on, as far as checkCrashes is concerned
		}
		if op.deadline.Before(h.end) {
			h.end = op.deadline
		}
		c.staleWrites(op)
		c.rec.add(leaseCall{client: client, names: o.Names, call: op.asked, ret: op.granted, tokens: h.tokens, lapse: op.deadline,
			op: linear.LeaseOp{Op: linear.Acquire, Owner: owner, Mode: modeOf(o.Kind)}, out: linear.Result{OK: true}})
		c.holds = append(c.holds, *h)
	case "unlocking":
		op.unlocking = childTime(f[2])
	case "unlocked":
		n, _ := strconv.Atoi(f[2])
		ret, err := childTime(f[3]), parseChildErrors(f[4])
		call := op.unlocking
		op.unlocking, op.unlocks = time.Time{}, n
		c.rec.ended(client, owner, o, linear.Release, call, ret, err)
		h := op.h
		_, stopped := c.stoppedWithin(call, ret)
		strict := !c.s.unlockMayFail(o.Kind) && !stopped // a stop may time it out, or outlast the hold
		switch {
		case n == 1 && err != nil && errors.Is(err, dlock.ErrNotHeld) && !h.lost && !h.frozen && !h.fixed &&
			op.deadline.Sub(call) > 500*time.Millisecond && strict:
			c.unlocks = append(c.unlocks, fmt.Sprintf("client %d op %d (%s, the child): Unlock of a lease that held to the end: %v", client, i, o.Kind, err))
		case n == 2 && !errors.Is(err, dlock.ErrNotHeld) && !stopped:
			c.unlocks = append(c.unlocks, fmt.Sprintf("client %d op %d (%s, the child): second Unlock returned %v, want ErrNotHeld", client, i, o.Kind, err))
		}
	}
}

// settle makes the records of what the kill cut short, once the child is
// gone: the call in flight is of unknown outcome, the hold open ended at
// the death and lapses at the last deadline the child told, and writes
// read after the death reach the store late.
func (c *child) settle(ctx context.Context) {
	if !c.killed {
		if !c.finished {
			c.errs = append(c.errs, fmt.Sprintf("the child exited before its operations ended: %s", lastLine(c.stderr.String())))
		}
		c.counts["crash.child.survived"]++
		c.notes = append(c.notes, fmt.Sprintf("child: ran to its end, not killed (drawn %+v)", c.run.kill))
		return
	}
	c.tellDeath()
	if c.cur < 0 {
		return
	}
	client, i := c.run.client, c.cur
	o, op := c.s.ops[client][i], &c.ops[i]
	owner := fmt.Sprintf("client %d op %d", client, i)
	unknown := c.death.Add(childApplied(c.s))
	switch {
	case !op.answered:
		// A dead waiter may be handed the lock until its registration
		// expires.
		c.rec.refused(client, owner, o, op.asked, unknown.Add(registrationLife), errKilled)
	case op.h != nil && !op.ended:
		h := op.h
		h.crashed = true
		lapse := op.deadline
		if !op.extending.IsZero() { // a shorter Extend may have been applied
			c.rec.ended(client, owner, o, linear.Extend, op.extending, unknown, errKilled)
			lapse = minTime(lapse, op.extending.Add(o.Extend))
		}
		h.end = minTime(c.death, lapse)
		c.staleWrites(op)
		c.rec.add(leaseCall{client: client, names: o.Names, call: op.asked, ret: op.granted, tokens: h.tokens, lapse: lapse,
			op: linear.LeaseOp{Op: linear.Acquire, Owner: owner, Mode: modeOf(o.Kind)}, out: linear.Result{OK: true}})
		c.holds = append(c.holds, *h)
	case !op.unlocking.IsZero():
		c.rec.ended(client, owner, o, linear.Release, op.unlocking, unknown, errKilled)
	}
	if len(c.lateWrites) == 0 {
		return
	}
	// The writes the child made before it died, which the store gets
	// after: with LateWrite, once the dead claim ran out (and anyone may
	// have taken the lock since).
	if c.run.kill.LateWrite {
		_ = sleepCtx(ctx, time.Until(claimsFrom(c.s, true, c.death).Add(deadClaim(o)+crashSlack)))
	}
	for _, w := range c.lateWrites {
		accepted := c.stores.write(w.name, w.token)
		c.counts["crash.child.latewrite"]++
		// The write is the hold's it was made under: the open one (now
		// crashed), or one that ended before the kill.
		for j := len(c.holds) - 1; j >= 0; j-- {
			if h := &c.holds[j]; h.tokens[w.name] == w.token {
				h.stale = append(h.stale, staleWrite{client: client, name: w.name, token: w.token, at: time.Now(), accepted: accepted})
				break
			}
		}
	}
}

// staleWrites keeps, of the writes of op's hold, those the child made
// past the hold's end (its lease's deadline): a frozen child's, or a
// fixed lease's held past it.
func (c *child) staleWrites(op *childOpState) {
	for _, w := range op.writes {
		if w.made.After(op.h.end) {
			op.h.stale = append(op.h.stale, w.staleWrite)
			c.counts["crash.child.stale"]++
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// finish waits for the child's records and adds them to the run's.
func (c *child) finish(out *outcome, holds *[]hold, waits *[]failedWait, unlocks *[]string) {
	if c == nil {
		return
	}
	<-c.done
	*holds = append(*holds, c.holds...)
	*waits = append(*waits, c.waits...)
	*unlocks = append(*unlocks, c.unlocks...)
	for _, e := range c.errs {
		out.violate("child: %s", e)
	}
	for k, n := range c.counts {
		out.injected[k] += n
	}
	out.notes = append(out.notes, c.notes...)
}

// checkChildFreed notes, for each lock the child held at its death, how
// long before another client held it, against the bound its TTL sets
// (checkCrashes judges the waiters; this shows the hand-over).
func (c *child) checkFreed(holds []hold, out *outcome) {
	if c == nil || !c.killed {
		return
	}
	for _, dead := range holds {
		if dead.client != c.run.client || !dead.crashed {
			continue
		}
		for name := range dead.tokens {
			var next *hold
			for j := range holds {
				h := &holds[j]
				if _, ok := h.tokens[name]; ok && h.client != c.run.client && h.start.After(c.death) && (next == nil || h.start.Before(next.start)) {
					next = h
				}
			}
			if next != nil {
				o := c.s.ops[c.run.client][c.cur]
				out.injected["crash.child.retaken"]++
				out.note("child: %s, held at its death, taken by client %d %v after it (asked %v after it; its TTL %v, its lease %v)", name, next.client,
					next.start.Sub(c.death).Round(time.Millisecond), next.asked.Sub(c.death).Round(time.Millisecond), o.TTL, o.Lease)
			}
		}
	}
}

// TestExplore_ChildKeepsTheCISchedules: under childStream, no drawn CI
// seed draws the child (every one keeps its schedule; a CI case runs
// one), and about one run in childRate of those without a failover does.
func TestExplore_ChildKeepsTheCISchedules(t *testing.T) {
	for _, seed := range ciSeeds {
		if p := randomParams(seed, maxClients()); p.has("child") {
			t.Errorf("CI seed %d draws the child: %s", seed, p)
		}
	}
	runs, children := 0, 0
	for seed := uint64(1000); seed < 6000; seed++ {
		p := randomParams(seed, 16)
		if p.has("child") && p.has("failover") {
			t.Errorf("seed %d: a child with a failover: %s", seed, p)
		}
		if !p.has("failover") {
			runs++
			if p.has("child") {
				children++
			}
		}
	}
	if rate := float64(children) / float64(runs); rate < 0.8/childRate || rate > 1.2/childRate {
		t.Errorf("%d children in %d runs without a failover: %.3f, want about 1/%d", children, runs, rate, childRate)
	}
}
