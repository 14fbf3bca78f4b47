//go:build faults

package faults

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// The crash fault: a process killed at a random point of the run, in the
// middle of a command or script call, a wait, a hold or an Unlock.
//
// It is done in the test process, and from Redis's side it is a SIGKILL:
// Redis knows a process only by its TCP connections and what arrives on
// them. A killed process's kernel closes its sockets (Redis frees those
// clients and their subscriptions) and nothing more comes from it. Here,
// first every hook of the process (its Client's and its Redlock's) refuses
// each later command before it reaches a socket, so no goroutine of the
// dead process (the renewer, a waiter, Client.Close) sends anything again,
// and go-redis's resends (late copies) die with it; then every connection
// of its go-redis clients is closed, those with a command in flight
// included: a command Redis had read is applied, one it had not is not, as
// with a real kill. The one thing not reproduced is a command cut off half
// written, which Redis discards on close: the same as not sent. The
// process's goroutines then stop: none acts again (no Unlock, no write to
// a store, no further operation), except a write it had already sent to a
// fenced store, which may arrive late (crash.LateWrite).

// crashStream is the key of the stream crashes are drawn from: under it,
// no CI seed but crashSeed draws one (TestExplore_CrashesKeepTheCISchedules).
const crashStream = 0xc854

// crashSeed is the CI seed that kills a process, and the one that
// migrates a slot: a cluster run of three clients over an RWMutex (both
// sides), a FairMutex, a Semaphore, an Election and a Redlock, with no
// other fault, so the waiter check applies (whether a wait falls in its
// window depends on timing; TestCheckCrashes_* checks the check itself).
const crashSeed = 143

// crashRate: a crash comes in one run in crashRate, quiet or not.
const crashRate = 4

// drawCrash draws whether the run kills a process, from a stream of its
// own, so every seed keeps the schedule it had without crashes.
func (p *params) drawCrash(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, crashStream))
	if rng.IntN(crashRate) == 0 {
		p.Faults = append(p.Faults, "crash")
	}
}

// crash is one process's death.
type crash struct {
	Process int
	At      time.Duration // after the run's start
	// LateWrite: a holder killed mid-hold had a write with its token on its
	// way to the fenced store, which arrives after the lock has freed.
	LateWrite bool
	// Child: the process is a child process, killed by SIGKILL when its
	// kill says (explore_child_test.go), not by killProcesses.
	Child bool
}

// drawCrashes picks the process that dies and when, while clients
// contend: one of them, and never the only one (another must be left to
// wait for its locks).
func drawCrashes(p params, process []int) []crash {
	if !p.has("crash") {
		return nil
	}
	procs := slices.Max(process) + 1
	if procs < 2 {
		return nil
	}
	rng := rand.New(rand.NewPCG(p.Seed, crashStream+1))
	return []crash{{Process: rng.IntN(procs), At: time.Duration(50+rng.IntN(2000)) * time.Millisecond, LateWrite: rng.IntN(2) == 0}}
}

// errKilled is what every command of a killed process gets.
var errKilled = errors.New("faults: the process was killed")

// crashState is a process's death: dead is closed once it died, gone
// once its goroutines stopped (its leases' deadlines are then final).
type crashState struct {
	dead      chan struct{}
	gone      chan struct{}
	at        time.Time
	lateWrite bool
	conns     []redis.UniversalClient // every go-redis client of the process
}

func newCrashState() *crashState {
	return &crashState{dead: make(chan struct{}), gone: make(chan struct{})}
}

// died is closed once the process died; nil (never ready) for a process
// that cannot die (the checks' own).
func (p *process) died() <-chan struct{} {
	if p.crash == nil {
		return nil
	}
	return p.crash.dead
}

// killed reports whether the process died.
// failedBy is until when an acquisition that failed at now may take
// effect: now, or, in a process that died, until the registration of a
// waiter it had expires (three waiter refreshes), as a release may hand
// the lock to it until then, as the child's (explore_child_test.go). A
// soak's run (seed 1795721477811378860) flagged a TryLock refused while a
// lock handed to a dead process's waiter, 43 ms after its death, held.
func (p *process) failedBy(now time.Time) time.Time {
	if p.killed() {
		return now.Add(registrationLife)
	}
	return now
}

func (p *process) killed() bool {
	select {
	case <-p.died():
		return true
	default:
		return false
	}
}

// kill kills the process as SIGKILL would (see the top of this file).
func (p *process) kill(lateWrite bool) {
	for _, h := range append([]*commandFaults{p.hook}, p.nodeHooks...) {
		h.die()
	}
	p.crash.at, p.crash.lateWrite = time.Now(), lateWrite
	close(p.crash.dead)
	for _, c := range p.crash.conns {
		_ = c.Close()
	}
	// Its goroutines stop; what they would send, the hooks refuse.
	_ = p.client.Close()
	close(p.crash.gone)
}

// awaitDeath returns once a killed process's renewals have stopped: a
// renewal it sent before it died may still have confirmed.
func (p *process) awaitDeath() { <-p.crash.gone }

// sleep is a holder's wait, cut short when its lease ends, its process
// dies, or its process's suspension begins (explore_suspend_test.go).
func (p *process) sleep(l *dlock.Lease, d time.Duration) {
	select {
	case <-l.Done():
	case <-p.died():
	case <-p.suspending():
	case <-time.After(d):
	}
}

// crashedHold ends h at its process's death: the dead process counts on
// nothing after it. A write it had on its way to the store arrives once the
// lock has had time to free (its TTL past the death), and the store must
// refuse it if anyone held the lock since.
func (p *process) crashedHold(h *hold, o op, stores *fencedStores) *hold {
	h.crashed = true
	if p.crash.at.Before(h.end) {
		h.end = p.crash.at
	}
	// A frozen holder killed before it woke never made its wake-up write.
	h.stale = slices.DeleteFunc(h.stale, func(w staleWrite) bool { return w.at.After(p.crash.at) })
	if !p.crash.lateWrite {
		return h
	}
	time.Sleep(time.Until(p.crash.at.Add(deadClaim(o) + crashSlack)))
	for name, token := range h.tokens {
		h.stale = append(h.stale, staleWrite{client: h.client, name: name, token: token, at: time.Now(),
			accepted: stores.write(name, token)})
	}
	return h
}

// die makes the hook refuse every later command, and drop late copies.
func (f *commandFaults) die() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dead = true
}

func (f *commandFaults) isDead() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dead
}

// killProcesses kills the schedule's processes at their times.
func killProcesses(ctx context.Context, s *schedule, procs map[int]*process, out *outcome) {
	start := time.Now()
	for _, c := range s.crashes {
		if c.Child {
			continue
		}
		if sleepCtx(ctx, time.Until(start.Add(c.At))) != nil {
			return
		}
		procs[c.Process].kill(c.LateWrite)
		out.injected["crash"]++
	}
}

// waiterRefresh is the explored clients' WithWaiterRefresh.
const waiterRefresh = 300 * time.Millisecond

// registrationLife is how long a waiter's registration lasts unrenewed
// (three waiter refreshes, dlock's rule): a release may hand the lock to a
// dead waiter until then.
const registrationLife = 3 * waiterRefresh

// crashSlack is how late past its bound a waiter may get a dead process's
// lock: a waiter's refresh (it tries again then, if no wake-up came) and
// some scheduling on a loaded machine (crashScheduling).
const crashSlack = waiterRefresh + crashScheduling

// crashScheduling is the part of crashSlack a loaded machine's scheduling
// may take. A wait that ended later still is explained only by its
// process starved for that and for how late it was (starvedPast).
const crashScheduling = 300 * time.Millisecond

// deadClaim is how long after its death a process's operation o may keep
// its lock from others (docs/ARCHITECTURE.md, "Registrations expire"): a
// hold its TTL (or fixed lease, or Extend's TTL) from its last renewal or
// grant, which came before the death; a lock handed to it while it
// waited, its registration's remainder, at most three waiter refreshes.
func deadClaim(o op) time.Duration {
	return max(o.TTL, o.Lease, o.Extend, registrationLife)
}

// claimsFrom is when the claims of a process dead at at start to run
// out: at its death, or for a child, once Redis may have applied what the
// dead child's socket still held (childApplied), which may be a grant.
func claimsFrom(s *schedule, child bool, at time.Time) time.Time {
	if child {
		return at.Add(childApplied(s))
	}
	return at
}

// waitClaimsOut waits until every claim any operation of the run may have
// left at since (a failover that lost writes, say) has run out, with
// crashSlack, or ctx ends: a deadline, not a guess at another goroutine.
func waitClaimsOut(ctx context.Context, s *schedule, since time.Time) {
	var claim time.Duration
	for _, ops := range s.ops {
		for _, o := range ops {
			claim = max(claim, deadClaim(o))
		}
	}
	_ = sleepCtx(ctx, time.Until(since.Add(claim+crashSlack)))
}

// failedWait is a Lock that waited and did not get its lock.
type failedWait struct {
	client        int
	op            op
	asked, gaveUp time.Time
	err           error
}

// waitCrashedOut returns once every dead process's claims have run out,
// so that the orphan check after it (checkSettled) finds each of its
// locks free: a crashed holder's locks are free by their TTL.
func waitCrashedOut(ctx context.Context, s *schedule, procs map[int]*process) {
	for _, c := range s.crashes {
		p := procs[c.Process]
		if !p.killed() {
			continue
		}
		var claim time.Duration
		for client, ops := range s.ops {
			if s.process[client] == c.Process {
				for _, o := range ops {
					claim = max(claim, deadClaim(o))
				}
			}
		}
		_ = sleepCtx(ctx, time.Until(claimsFrom(s, c.Child, p.crash.at).Add(claim+crashSlack)))
	}
}

// checkCrashes: a live client that waited on a lock only dead processes
// kept from it got it within their claims (deadClaim) and crashSlack; a
// wait that gave up or got the lock later, with no live hold of the lock
// in the meantime, is a violation. With more than one dead process, any
// of them may have kept the waiter out (one dying while another's claim
// still held, or holding the lock when it died after the other): a wait
// is judged once, by the latest claim on its locks of any dead process
// but its own, from that process's death (claimsFrom). A wait asked once
// that claim had run out was kept from nothing dead and is not judged
// here. A MultiLock waits for all its locks: it is judged once, by the
// latest claim on any of them, and a live hold of any of them excuses it.
// Judged in runs whose other faults
// delay no command (extend, scriptflush; a slot migration only its own
// slot's, whose waits are not judged), and not for Redlocks, whose waits
// follow a retry policy of their own.
func checkCrashes(s *schedule, procs map[int]*process, holds []hold, waits []failedWait, out *outcome) {
	for _, h := range holds {
		if h.crashed {
			out.injected["crash.held"]++
			out.injected["crash.latewrite"] += len(h.stale)
		}
	}
	if slices.ContainsFunc(s.Faults, func(f string) bool {
		return !slices.Contains([]string{"crash", "child", "extend", "scriptflush", "migrate"}, f)
	}) {
		return
	}
	moved := migratedNames(s) // a migration delays its slot's commands
	var deaths []deadClaims
	for _, c := range s.crashes {
		if dead := procs[c.Process]; dead.killed() {
			deaths = append(deaths, newDeadClaims(s, c, dead.crash.at))
		}
	}
	for _, w := range waits {
		if w.op.Try || w.op.Cancel > 0 || w.op.Kind == "redlock" ||
			!errors.Is(w.err, dlock.ErrNotAcquired) || slices.ContainsFunc(w.op.Names, func(n string) bool { return slices.Contains(moved, n) }) {
			continue
		}
		d, used, b := latestClaim(deaths, s.process[w.client], w.op.Names, w.op.Kind)
		if d == nil || !w.gaveUp.After(b) || w.asked.After(b.Add(-crashSlack)) {
			continue
		}
		out.checks++
		out.injected[d.waiter()]++
		if liveHoldDuring(holds, w.op.Names, d.at, w.gaveUp) {
			continue
		}
		if starved, ok := starvedPast(procs[s.process[w.client]], b, w.gaveUp); ok {
			out.starve("crash: client %d waited on %s (%s) from %v to %v after a process using it died, and gave up; it was free by %v at the latest, and its process starved %v meanwhile",
				w.client, strings.Join(used, ","), w.op.Kind, w.asked.Sub(d.at), w.gaveUp.Sub(d.at), b.Sub(d.at), starved)
		} else {
			out.violate("crash: client %d waited on %s (%s) from %v to %v after a process using it died, with no live holder, and gave up; it was free by %v at the latest",
				w.client, strings.Join(used, ","), w.op.Kind, w.asked.Sub(d.at), w.gaveUp.Sub(d.at), b.Sub(d.at))
		}
	}
	// A wait that ended in a hold: the same bound.
	for _, h := range holds {
		if h.crashed || h.kind == "redlock" {
			continue
		}
		names := slices.Sorted(maps.Keys(h.tokens))
		if slices.ContainsFunc(names, func(n string) bool { return slices.Contains(moved, n) }) {
			continue
		}
		d, used, b := latestClaim(deaths, s.process[h.client], names, h.kind)
		if d == nil || !h.start.After(b) || h.asked.After(b.Add(-crashSlack)) {
			continue
		}
		out.checks++
		out.injected[d.waiter()]++
		if liveHoldDuring(holds, names, d.at, h.start) {
			continue
		}
		if starved, ok := starvedPast(procs[s.process[h.client]], b, h.start); ok {
			out.starve("crash: client %d waited on %s (%s) from %v to %v after a process using it died; it was free by %v at the latest, and its process starved %v meanwhile",
				h.client, strings.Join(used, ","), h.kind, h.asked.Sub(d.at), h.start.Sub(d.at), b.Sub(d.at), starved)
		} else {
			out.violate("crash: client %d waited on %s (%s) from %v to %v after a process using it died, with no live holder; it was free by %v at the latest",
				h.client, strings.Join(used, ","), h.kind, h.asked.Sub(d.at), h.start.Sub(d.at), b.Sub(d.at))
		}
	}
}

// starvedPast: the waiter's process p was starved, from when the dead
// process's claim ran out (b less crashSlack) to the wait's end, for as
// long as the wait ended past its bound b and the scheduling crashSlack
// allows for on top: without that, the wait would have ended in time. A
// stall while the claim held kept the waiter from nothing (it tries again
// once it runs), so it does not count. The starvation that explains a
// lost lease (process.starved), so a wait it explains counts as starved,
// as such a loss does.
func starvedPast(p *process, b, end time.Time) (time.Duration, bool) {
	if p == nil {
		return 0, false
	}
	starved := p.starved(b.Add(-crashSlack), end)
	return starved, starved >= end.Sub(b)+crashScheduling
}

// deadClaims is a dead process's claims: each lock it used, the latest
// its claim on it may last, and how it used it.
type deadClaims struct {
	crash crash
	at    time.Time // its death
	bound map[string]time.Time
	kinds map[string][]string
}

// newDeadClaims is the claims of c's process, dead at at: those of every
// operation of its schedule, made or not.
func newDeadClaims(s *schedule, c crash, at time.Time) deadClaims {
	d := deadClaims{crash: c, at: at, bound: map[string]time.Time{}, kinds: map[string][]string{}}
	from := claimsFrom(s, c.Child, at)
	for client, ops := range s.ops {
		if s.process[client] != c.Process {
			continue
		}
		for _, o := range ops {
			for _, name := range o.Names {
				if b := from.Add(deadClaim(o) + crashSlack); b.After(d.bound[name]) {
					d.bound[name] = b
				}
				d.kinds[name] = append(d.kinds[name], o.Kind)
			}
		}
	}
	return d
}

// waiter is the count of the waits judged against d.
func (d *deadClaims) waiter() string {
	if d.crash.Child {
		return "crash.child.waiter"
	}
	return "crash.waiter"
}

// latestClaim is, of the dead processes but the waiter's own (process),
// the one whose claims may keep a waiter of kind on names out the
// longest, the names it used (deadBound) and how long; nil if none used
// them.
func latestClaim(deaths []deadClaims, process int, names []string, kind string) (latest *deadClaims, used []string, b time.Time) {
	for i := range deaths {
		d := &deaths[i]
		if d.crash.Process == process {
			continue
		}
		if u, db := deadBound(d.bound, d.kinds, names, kind); u != nil && db.After(b) {
			latest, used, b = d, u, db
		}
	}
	return latest, used, b
}

// deadBound is how long a dead process's claims may keep a waiter of kind
// on names out: the latest bound of the names it used in a way that
// blocks the waiter (used, in names' order; nil if none). A MultiLock
// waits until every one of its locks is free, so its wait is bounded by
// the latest claim on any of them, not by each lock's own.
func deadBound(bound map[string]time.Time, kinds map[string][]string, names []string, kind string) (used []string, b time.Time) {
	for _, name := range names {
		nb, ok := bound[name]
		if !ok || !blocks(kinds[name], kind) {
			continue
		}
		used = append(used, name)
		if nb.After(b) {
			b = nb
		}
	}
	return used, b
}

// blocks reports whether a dead process's use of a lock as kinds could
// keep a waiter of kind out: a reader out of a reader's lock, a permit
// out of a semaphore with permits to spare, could not.
func blocks(kinds []string, waiter string) bool {
	return slices.ContainsFunc(kinds, func(k string) bool {
		return hold{kind: k}.exclusive() || hold{kind: waiter}.exclusive()
	})
}

// liveHoldDuring reports whether a live process held one of names at
// some time in (from, to): a waiter on them (a MultiLock waits for each)
// may then have been kept out by it, or lost the race.
func liveHoldDuring(holds []hold, names []string, from, to time.Time) bool {
	return slices.ContainsFunc(holds, func(h hold) bool {
		return !h.crashed && h.start.Before(to) && h.end.After(from) &&
			slices.ContainsFunc(names, func(name string) bool { _, ok := h.tokens[name]; return ok })
	})
}
