//go:build faults

package faults

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/clock"
	"github.com/dlockio/dlock/internal/scripts"
)

// The suspend fault: one process's machine suspended (a laptop's lid
// closed, a VM frozen) for longer than any TTL its leases have, while its
// clients hold and contend, then resumed.
//
// Every process of a suspend run reads a clock of its own
// (internal/clock, attached to its dlock Client and Redlock with
// clock.Use). While the process is suspended, its clock's readings stand
// still and dlock's own timers, renewer and woken waiters wait for the
// resume; its commands are held at its hooks (its Client's and its
// Redlock's: nothing of it reaches Redis), and so are the replies to those
// it had sent, which its code reads once it resumes; its holders do
// nothing. Redis, on other machines, goes on expiring its keys. Once
// resumed, its monotonic readings lag real time by the suspension, its
// wall readings do not: a lease that counted on the monotonic clock alone
// would count itself valid for up to a third of its TTL more, and its
// holder act on a lock Redis has given to another.
//
// Not labelled: dlock promises to count such a lease lost. Each holder
// that held across the suspension looks at its lease the moment it
// resumes, as code stopped mid-hold would, and acts on it (a write with
// its token) if it says it holds: a lease that says so after a
// suspension longer than its TTL is a violation ("suspend"), and so is a
// hold that outlasts its lease's deadline into another's ("overlap",
// "linearizable": a lease's deadline is read on its process's clock and
// converted to real time, clock.Real). The explorer reads its own times
// (a hold's start and end, every call's window) on the machine's clock.

// suspendStream is the key of the stream suspensions are drawn from:
// under it, no CI seed draws one (TestExplore_NewFaultsLeaveCISeedsAlone).
const suspendStream = 0x5b7c

// suspendRate: a suspension comes in one run in suspendRate.
const suspendRate = 5

// drawSuspend draws whether the run suspends a process, from a stream of
// its own, so every seed keeps the schedule it had without it. Not with a
// crash: a killed process is not resumed.
func (p *params) drawSuspend(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, suspendStream))
	if rng.IntN(suspendRate) == 0 && !p.has("crash") {
		p.Faults = append(p.Faults, "suspend")
	}
}

// suspend is one process's machine suspended.
type suspend struct {
	Process int
	At      time.Duration // after the run's start
	For     time.Duration // past every TTL the process's leases ask for
	// OnGrant: it begins, from At on, as the reply to one of the
	// process's acquires that was granted arrives (within suspendArmed,
	// else then): the process reads the grant only once it resumes.
	OnGrant bool
}

// suspendArmed is how long an OnGrant suspension waits for a grant's
// reply before it begins anyway.
const suspendArmed = 2 * time.Second

// drawSuspensions picks the process suspended, when, and for how long:
// while clients contend, and longer than the longest TTL, lease time or
// Extend of its operations, by 0.2–1.2 s, so that Redis expires every
// hold it had and others may take them meanwhile.
func drawSuspensions(p params, ops [][]op, process []int) []suspend {
	if !p.has("suspend") || p.has("crash") {
		return nil
	}
	rng := rand.New(rand.NewPCG(p.Seed, suspendStream+1))
	proc := rng.IntN(slices.Max(process) + 1)
	var longest time.Duration
	for c, cops := range ops {
		if process[c] == proc {
			for _, o := range cops {
				longest = max(longest, suspendBound(o))
			}
		}
	}
	return []suspend{{Process: proc, At: time.Duration(200+rng.IntN(1800)) * time.Millisecond,
		For: longest + time.Duration(200+rng.IntN(1000))*time.Millisecond, OnGrant: rng.IntN(2) == 0}}
}

// suspendBound is the longest a lease of o may count on from its last
// confirmed sending: its TTL, its fixed lease time or its Extend's TTL.
func suspendBound(o op) time.Duration { return max(o.TTL, o.Lease, o.Extend) }

// suspendState is a process's suspension as its holders see it.
type suspendState struct {
	began   chan struct{} // closed when it began
	resumed chan struct{} // closed when it ended
	at      time.Time     // when it began (real time)
	length  time.Duration // how long it lasted, once ended
	once    sync.Once     // it begins once
	armed   atomic.Bool   // an OnGrant suspension waits for a grant's reply
	onGrant bool          // it began with a grant's reply

	mu      sync.Mutex
	wakes   []resumedHold
	wakeups int // holders that held across it
}

// resumedHold is what a holder found when its process resumed.
type resumedHold struct {
	client int
	kind   string
	tokens map[string]uint64
	bound  time.Duration // suspendBound of its operation
	err    error         // its lease's Err at the resume
}

func newSuspendState() *suspendState {
	return &suspendState{began: make(chan struct{}), resumed: make(chan struct{})}
}

// suspendProcesses suspends the schedule's processes at their times, each
// for its length, and resumes them.
func suspendProcesses(s *schedule, procs map[int]*process, out *outcome) {
	start := time.Now()
	for _, sp := range s.suspended {
		time.Sleep(time.Until(start.Add(sp.At)))
		p := procs[sp.Process]
		st := p.suspended
		if sp.OnGrant {
			st.armed.Store(true)
			select {
			case <-st.began:
			case <-time.After(suspendArmed):
			}
			st.armed.Store(false)
		}
		p.beginSuspension(false)
		time.Sleep(time.Until(st.at.Add(sp.For))) // the suspension
		st.length = p.clock.Resume()
		close(st.resumed)
		out.injected["suspend"]++
		if st.onGrant {
			out.injected["suspend.ongrant"]++
		}
	}
}

// beginSuspension suspends the process, once: at the suspension's time,
// or as a grant's reply arrives (onGrant).
func (p *process) beginSuspension(onGrant bool) {
	st := p.suspended
	st.once.Do(func() {
		st.at, st.onGrant = time.Now(), onGrant
		p.clock.Suspend()
		close(st.began)
	})
}

// suspendOnGrant begins an armed suspension when cmds carry a granted
// acquire's reply: the hook then holds the reply until the resume.
func (p *process) suspendOnGrant(cmds []redis.Cmder) {
	if !p.suspended.armed.Load() || !anyAcquire(cmds) {
		return
	}
	for _, c := range cmds {
		if cmd, ok := c.(*redis.Cmd); ok && cmd.Err() == nil {
			if reply, err := scripts.AcquireReply(cmd); err == nil && len(reply) > 0 && reply[0] == 1 {
				p.beginSuspension(true)
				return
			}
		}
	}
}

// suspending is closed when the process's suspension begins, if it has
// not yet; nil (never ready) otherwise.
func (p *process) suspending() <-chan struct{} {
	if p.suspended == nil {
		return nil
	}
	select {
	case <-p.suspended.began:
		return nil
	default:
		return p.suspended.began
	}
}

// awake returns once the process is not suspended: its clients act only
// then.
func (p *process) awake() { p.clock.Wait() }

// deadline is l's deadline in real time: read on the process's clock,
// which lags real time once it was suspended.
func (p *process) deadline(l *dlock.Lease) time.Time { return p.clock.Real(l.Deadline()) }

// resumeHolding wakes a holder whose process was suspended while it held
// (since start): once the process resumes, it looks at its lease, as code
// stopped mid-hold does, and acts on it if it says it holds: a write
// with its token. It reports whether it woke so (once per hold).
func (p *process) resumeHolding(h *hold, o op, lease *dlock.Lease, stores *fencedStores) bool {
	st := p.suspended
	if st == nil {
		return false
	}
	select {
	case <-st.began:
	default:
		return false
	}
	if st.at.Before(h.start) {
		return false
	}
	<-st.resumed
	err := lease.Err()
	st.mu.Lock()
	st.wakeups++
	st.wakes = append(st.wakes, resumedHold{client: h.client, kind: h.kind, tokens: h.tokens, bound: suspendBound(o), err: err})
	st.mu.Unlock()
	if err == nil {
		for name, token := range h.tokens {
			h.stale = append(h.stale, staleWrite{client: h.client, name: name, token: token, at: time.Now(),
				accepted: stores.write(name, token)})
		}
	}
	return true
}

// checkSuspensions: a holder whose lease says it holds when its process
// resumes from a suspension longer than anything the lease could count
// on (nothing of the process reached Redis meanwhile) acts on a lock
// Redis may have given to another.
func checkSuspensions(procs map[int]*process, out *outcome) {
	for _, p := range procs {
		st := p.suspended
		if st == nil {
			continue
		}
		select {
		case <-st.resumed:
		default:
			continue
		}
		st.mu.Lock()
		out.injected["suspend.held"] += st.wakeups
		for _, w := range st.wakes {
			out.checks++
			if w.err != nil {
				out.injected["suspend.lost"]++
				continue
			}
			if st.length > w.bound {
				out.violate("suspend: client %d's %s lease %v said it held when its process resumed from %v suspended, past the %v it could count on: Redis may have given the lock to another",
					w.client, w.kind, w.tokens, st.length.Round(time.Millisecond), w.bound)
			}
		}
		st.mu.Unlock()
	}
}

// useClock gives a process of a suspend run a clock of its own, read by
// its Client and its Redlock, and held to by its hooks.
func (p *process) useClock(hooks []*commandFaults) {
	p.clock = clock.New()
	p.suspended = newSuspendState()
	clock.Use(p.client, p.clock)
	if p.redlock != nil {
		clock.Use(p.redlock, p.clock)
	}
	for _, h := range hooks {
		h.clock = p.clock
		h.onReply = p.suspendOnGrant
	}
}

// TestExplore_SuspensionsKeepTheCISchedules: under suspendStream no CI
// seed draws a suspension, so each keeps the schedule that caught what it
// caught (a CI case runs one: its params are given). And the draw keeps
// to what it promises: about one run in suspendRate, never with a crash,
// and every suspension longer than anything its process's leases may
// count on.
func TestExplore_SuspensionsKeepTheCISchedules(t *testing.T) {
	for _, seed := range ciSeeds {
		if p := randomParams(seed, maxClients()); p.has("suspend") {
			t.Errorf("CI seed %d draws a suspension: %s", seed, p)
		}
	}
	may, drawn := 0, 0
	for seed := uint64(1000); seed < 6000; seed++ {
		p := randomParams(seed, 16)
		if p.has("crash") {
			if p.has("suspend") {
				t.Errorf("seed %d: a suspension with a crash: %s", seed, p)
			}
			continue
		}
		may++
		if !p.has("suspend") {
			continue
		}
		drawn++
		s := makeSchedule(p)
		if len(s.suspended) != 1 {
			t.Fatalf("seed %d: %d suspensions, want 1", seed, len(s.suspended))
		}
		sp := s.suspended[0]
		for c, ops := range s.ops {
			for _, o := range ops {
				if s.process[c] == sp.Process && sp.For <= suspendBound(o) {
					t.Errorf("seed %d: process %d suspended %v, within its op's %v", seed, sp.Process, sp.For, suspendBound(o))
				}
			}
		}
	}
	if rate := float64(drawn) / float64(may); rate < 0.8/suspendRate || rate > 1.2/suspendRate {
		t.Errorf("%d suspensions in %d runs that may have one: %.3f, want about 1/%d", drawn, may, rate, suspendRate)
	}
}
