//go:build faults

package faults

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// The explorer: randomized, replayable runs of every lock type under faults
// at every layer, each run judged by every checker. CI runs a fixed set of
// seeds and a few fresh ones; -explore D runs fresh seeds for D and writes
// a report. A failure prints its seed and the flags that replay it, after
// shrinking it to the smallest run that still fails the same way.
//
//	go test -tags faults -run Explore .                               # CI budget
//	go test -tags faults -run Explore -explore 30m -explore.report R.md . # soak
//	go test -tags faults -run Explore -explore 30m -explore.parallel 3 .  # soak in 3 lanes
//	go test -tags faults -run Explore -explore.seed 42 -explore.clients 3 ... # replay
//	go test -tags faults -run Explore -v -explore.schedule -explore.seed 42 ... # replay, its schedule logged
var (
	exploreFor    = flag.Duration("explore", 0, "explore fresh seeds for this long (0: the CI budget)")
	exploreReport = flag.String("explore.report", "", "write the explorer's report (Markdown) here")
	replaySeed    = flag.Uint64("explore.seed", 0, "replay this seed (with the other -explore.* flags)")
	replayClients = flag.Int("explore.clients", 0, "replay: clients")
	replayOps     = flag.Int("explore.ops", 0, "replay: operations per client")
	replayKinds   = flag.String("explore.kinds", "", "replay: lock kinds, comma-separated")
	replayFaults  = flag.String("explore.faults", "", "replay: fault kinds, comma-separated, or none")
	replayCluster = flag.Bool("explore.cluster", false, "replay: on a 3-master cluster")
	noShrink      = flag.Bool("explore.noshrink", false, "report a failure as found, without shrinking it")
	lanes         = flag.Int("explore.parallel", 1, "soak: schedules run at once, each lane on servers of its own")
	showSchedule  = flag.Bool("explore.schedule", false, "replay: log the run's schedule (operations, faults and when) before running it")
)

// ciSeeds are the seeds every CI run explores: chosen to cover each lock
// kind and fault kind, the cluster, and fault-free runs (see
// TestExplore_CISeedsCoverEveryKind), and among them runs that caught a
// reverted fix (faults/RESULTS.md, "Reverted fixes"): 1 (release mark), 2 and 4
// (Extend), 6 and 24 (MultiLock's earlier parts), 59 (renewals per node),
// 50, 64 and 101 (tombstones), 68 (tokens floored by server time, through
// a restart); 64 and 101 once failed on the checker's own error, an
// abandon counted applied when it had met NOSCRIPT (see
// commandFaults.noteAbandons). 47 and 68 run Redlocks, 68 restarts one of
// their masters. crashSeed (143) kills a process and migrates a slot;
// netCISeed (5475) runs network faults and an eviction.
var ciSeeds = []uint64{crashSeed, 1, 2, 3, 4, 6, 7, 16, 24, 47, 50, 59, 64, 68, 101, netCISeed} // crashSeed first: it waits out a dead process's TTLs, and last it would lengthen the tail

// ciCases are runs CI makes besides ciSeeds whose params are not drawn
// from their seed: each is the targeted run that caught a reverted fix no
// drawn CI seed catches (faults/RESULTS.md, "Reverted fixes"). Seed 52's run
// catches the Mutex half of the tombstone after an applied attempt
// (mutex_abandon.lua writing none when it releases a hold): "orphan", a
// Mutex's, Election's or Redlock's late copy granted after its call gave
// up. No drawn CI seed draws a failover (they keep their schedules): the
// second case is the shrunk run that found renewals counted on without
// their replica. Nor does one draw a cluster failover: the third case is
// a short run of both kinds (explore_cfailover_test.go); nor a child
// process, nor a slow observer: the last two cases are the only CI runs
// with one.
var ciCases = []params{
	{Seed: 52, Clients: 6, Ops: 12, Kinds: []string{"mutex", "election", "redlock"}, Faults: []string{"late", "lost", "drop"}},
	// A failover's: renewals confirmed by no replica moved a lease's
	// deadline (WithReplicaAck), and a reader's Unlock was refused before
	// it, after the promotion (failed 3 replays of 3 before the fix).
	{Seed: 1795688454339701332, Clients: 2, Ops: 7, Kinds: []string{"rw.read"}, Faults: []string{"failover"}},
	// Cluster failovers of a mutex's master: graceful 291 ms in, then,
	// once settled, forced back after its replica was cut off for 382 ms
	// (labelled). One case for both: a replicated cluster takes 10 s to
	// start, in the lane that first needs it.
	{Seed: 171786, Clients: 3, Ops: 6, Kinds: []string{"mutex", "rw.read", "rw.write", "semaphore"}, Faults: []string{"cfailover", "ctakeover"}, Cluster: true},
	// A suspension's (explore_suspend_test.go), which begins as a grant's
	// reply arrives: with a lease's deadline on the monotonic clock alone
	// (leftAt), holders of the resumed process said they held ("suspend",
	// "linearizable"), 3 replays of 3; with a grant judged by it alone
	// (startLease), the grant was returned lost ("returned lost"), 3 of 3.
	{Seed: 8, Clients: 3, Ops: 4, Kinds: []string{"mutex"}, Faults: []string{"suspend"}},
	// The child process's (explore_child_test.go): killed 146 ms into a
	// FairMutex Lock; with registrations lasting 30 waiter refreshes, not
	// 3, the lock handed to the dead waiter was an orphan (failed 2 of 2;
	// about 4 s).
	{Seed: 56, Clients: 5, Ops: 6, Kinds: []string{"mutex", "fair"}, Faults: []string{"child"}},
	// A slow observer's (explore_slowobserver_test.go): with a batch's
	// leases held until every Renewal hook of it returned, a MultiLock was
	// lost ("unexplained loss", 3 runs of 3; about 4 s).
	{Seed: 60, Clients: 6, Ops: 8, Kinds: []string{"mutex", "rw.write", "semaphore", "multi"}, Faults: []string{"slowobserver"}},
	// A late copy of a waiting call's first attempt (explore_latefirst_test.go):
	// with f5a87ca's scripts reverted, an RWMutex's next attempt that found
	// the hold the copy took left the call's registration ("registration"),
	// 4 replays of 4 (about 10 s).
	{Seed: 21, Clients: 6, Ops: 10, Kinds: []string{"rw.read", "rw.write", "semaphore"}, Faults: []string{"late", "latefirst"}},
	// A failover behind a Redlock master (explore_rlfailover_test.go):
	// with the restart guard going by the promoted replica's uptime alone
	// (bc95db3's identity check removed, scratch), two Redlock holders at
	// once ("overlap", "linearizable"), 3 replays of 3 (about 20 s).
	{Seed: 81, Clients: 6, Ops: 10, Kinds: []string{"redlock"}, Faults: []string{"drop", "rlfailover"}},
}

// ciRuns are the params of every CI run: ciCases first (long runs that
// start first end the two lanes closer together), then ciSeeds' drawn
// ones.
func ciRuns() []params {
	runs := slices.Clone(ciCases)
	for _, seed := range ciSeeds {
		runs = append(runs, randomParams(seed, maxClients()))
	}
	return runs
}

// ciFresh is how many fresh seeds a CI run adds to ciSeeds and ciCases.
const ciFresh = 1

// maxClients is the most clients a drawn run has.
func maxClients() int {
	if *exploreFor > 0 {
		return 16
	}
	return 6
}

func TestExplore(t *testing.T) {
	x := newExplorer(t)
	if *replaySeed != 0 {
		if *showSchedule {
			logSchedule(t, replayParams())
		}
		x.explore(x.servers, replayParams())
		x.finish()
		return
	}
	if *exploreFor > 0 {
		end := time.Now().Add(*exploreFor)
		var seed atomic.Uint64
		seed.Store(uint64(time.Now().UnixNano()))
		t.Logf("exploring from seed %d for %v in %d lanes", seed.Load(), *exploreFor, *lanes)
		// A run mostly waits (holds, TTLs, waits, the settling checks), so
		// lanes of their own servers multiply the runs a soak makes on few
		// cores; a lane's cluster and Redlock masters are its own, as a
		// run's faults (a pause, FLUSHALL, a restart) hit a whole node.
		var wg sync.WaitGroup
		for lane := range *lanes {
			e := x.servers
			if lane > 0 {
				e = newServers(t)
			}
			wg.Go(func() {
				for time.Now().Before(end) {
					if p := randomParams(seed.Add(1)-1, maxClients()); soakWants(p) {
						x.explore(e, p)
					}
				}
			})
		}
		wg.Wait()
		x.finish()
		return
	}
	runs := ciRuns()
	fresh := uint64(time.Now().UnixNano())
	var freshSeeds []uint64
	for i := range ciFresh {
		freshSeeds = append(freshSeeds, fresh+uint64(i))
		runs = append(runs, randomParams(fresh+uint64(i), maxClients()))
	}
	t.Logf("fresh seeds this run: %v", freshSeeds)
	// Two lanes, as a soak's: a run mostly waits, so two at once take
	// little more than half the time, and each run still has servers of
	// its own lane.
	next := make(chan params, len(runs))
	for _, p := range runs {
		next <- p
	}
	close(next)
	var wg sync.WaitGroup
	for lane := range ciLanes {
		e := x.servers
		if lane > 0 {
			e = newServers(t)
		}
		wg.Go(func() {
			for p := range next {
				x.explore(e, p)
			}
		})
	}
	wg.Wait()
	x.finish()
}

// ciLanes is how many of the CI budget's runs go at once.
const ciLanes = 2

// TestExplore_CISeedsCoverEveryKind keeps ciSeeds and ciCases honest:
// together they use every lock kind and every fault kind, the cluster,
// fault-free runs, and a Redlock whose master restarts (the restart
// guard's case); and each case names only kinds and faults that exist,
// with a seed of its own.
func TestExplore_CISeedsCoverEveryKind(t *testing.T) {
	for _, c := range ciCases {
		for _, k := range c.Kinds {
			if !slices.Contains(lockKinds, k) {
				t.Errorf("CI case %v: no lock kind %s", c, k)
			}
		}
		for _, f := range c.Faults {
			if !slices.Contains(faultKinds, f) {
				t.Errorf("CI case %v: no fault kind %s", c, f)
			}
		}
		if slices.Contains(ciSeeds, c.Seed) || c.Clients < 2 || c.Ops < 1 {
			t.Errorf("CI case %v: its seed is a drawn CI seed's, or it has no run", c)
		}
	}
	kinds, faults := map[string]bool{}, map[string]bool{}
	cluster, faultFree, guard := false, false, false
	for _, p := range ciRuns() {
		for _, k := range p.Kinds {
			kinds[k] = true
		}
		for _, f := range p.Faults {
			faults[f] = true
		}
		cluster = cluster || p.Cluster
		faultFree = faultFree || len(p.Faults) == 0
		guard = guard || p.has("restart") && slices.Contains(p.Kinds, "redlock")
	}
	for _, k := range lockKinds {
		if !kinds[k] {
			t.Errorf("no CI seed uses lock kind %s", k)
		}
	}
	for _, f := range faultKinds {
		if !faults[f] {
			t.Errorf("no CI seed injects %s", f)
		}
	}
	if !cluster || !faultFree || !guard {
		t.Errorf("CI seeds: cluster %v, fault-free %v, a Redlock master restarted %v; want all", cluster, faultFree, guard)
	}
}

func replayParams() params {
	p := params{Seed: *replaySeed, Clients: *replayClients, Ops: *replayOps, Cluster: *replayCluster,
		Kinds: strings.Split(*replayKinds, ",")}
	if *replayFaults != "" && *replayFaults != "none" {
		p.Faults = strings.Split(*replayFaults, ",")
	}
	if p.Clients == 0 || p.Ops == 0 || *replayKinds == "" {
		drawn := randomParams(p.Seed, maxClients())
		p.Clients, p.Ops, p.Kinds, p.Faults, p.Cluster = drawn.Clients, drawn.Ops, drawn.Kinds, drawn.Faults, drawn.Cluster
	}
	return p
}

// explorer runs schedules and keeps the tallies for the report.
type explorer struct {
	t       *testing.T
	servers *servers // the first lane's

	mu                                                                           sync.Mutex // a soak's lanes share the tallies
	runs, ops, acquisitions, checks, labelled, labelledOverlaps, starved, unmade int
	injected                                                                     map[string]int
	failures                                                                     []string
	started                                                                      time.Time
}

func newExplorer(t *testing.T) *explorer {
	processStalls() // from the first run on
	goroutineStalls()
	return &explorer{t: t, servers: newServers(t), injected: map[string]int{}, started: time.Now()}
}

// servers are the servers one lane's runs share: a cluster, and one with
// a replica per master (explore_cfailover_test.go), each started when
// first needed, and the Redlock's masters.
type servers struct {
	t          *testing.T
	cluster    func() *exploreEnv
	replicated func() *redistest.Cluster
	redlock    func() []*redistest.Server
}

func newServers(t *testing.T) *servers {
	e := &servers{t: t}
	var once sync.Once
	var env *exploreEnv
	e.cluster = func() *exploreEnv {
		once.Do(func() {
			c := redistest.StartCluster(t, clusterUser()...)
			env = &exploreEnv{nodes: c.Nodes, cluster: true, slots: c}
		})
		return env
	}
	var replicatedOnce sync.Once
	var replicated *redistest.Cluster
	e.replicated = func() *redistest.Cluster {
		replicatedOnce.Do(func() {
			replicated = redistest.StartReplicatedCluster(t, clusterUser()...)
		})
		return replicated
	}
	// The Redlock's masters start now, so that they are old enough to
	// vote (redlockGuard) by the first run that needs them.
	masters := startServers(t, redlockMasters)
	var redlockOnce sync.Once
	e.redlock = func() []*redistest.Server {
		redlockOnce.Do(func() { waitVoting(t, masters) })
		return masters
	}
	return e
}

// env is a fresh server for a standalone run (cheap, and a paused or
// flushed one harms no other run), the shared cluster otherwise; and the
// shared Redlock masters for a run with Redlocks (each run's keys are its
// own, and a node a run paused or restarted is back by the next).
func (e *servers) env(p params) *exploreEnv {
	env := &exploreEnv{}
	switch {
	case p.failsOverCluster():
		c := e.replicated()
		env.cluster, env.slots, env.cfail = true, c, newClusterFailovers(c)
		env.nodes, env.replicas = env.cfail.nodes()
	case p.Cluster:
		*env = *e.cluster()
	case p.has("failover"):
		env.failover = startFailoverEnv(e.t)
		env.nodes = []*redistest.Server{env.failover.f.Master}
	default:
		env.nodes = []*redistest.Server{startServer(e.t)}
	}
	if slices.Contains(p.Kinds, "redlock") {
		env.redlock = e.redlock()
		if p.has("rlfailover") {
			env.rlFailover = startRedlockFailover(e.t)
			env.redlock = append([]*redistest.Server{env.rlFailover.f.Master}, env.redlock[1:]...)
		}
	}
	return env
}

func (e *servers) run(p params) *outcome {
	env := e.env(p)
	out := runSchedule(env, makeSchedule(p))
	if env.rlFailover != nil {
		env.rlFailover.kill()
	}
	switch {
	case env.failover != nil:
		env.failover.kill()
	case !env.cluster:
		// Not at the test's end: a soak's thousands of runs would keep
		// as many servers (7 MB each), and their clients' connections,
		// until then.
		env.nodes[0].Close()
	}
	return out
}

func (x *explorer) explore(e *servers, p params) {
	began := time.Now()
	out := e.run(p)
	x.t.Logf("seed %d: %v (settling %v, porcupine %v), %d acquisitions, %d violations", p.Seed, time.Since(began).Round(time.Millisecond),
		out.settling.Round(time.Millisecond), out.linearizing.Round(time.Microsecond), out.acquisitions, len(out.violations))
	for _, n := range out.notes {
		x.t.Logf("seed %d: %s", p.Seed, n)
	}
	x.tally(p, out)
	if len(out.violations) == 0 {
		return
	}
	found := out
	if !*noShrink {
		found = e.shrink(out)
	}
	msg := fmt.Sprintf("seed %d: %d violations (%s)\n  found with: %s\n  shrunk to:  %s\n  replay: cd faults && go test -tags faults -run 'TestExplore$' %s .\n  %s",
		p.Seed, len(out.violations), out.class(), p, found.params, found.params, strings.Join(first(found.violations, 5), "\n  "))
	x.mu.Lock()
	x.failures = append(x.failures, msg)
	x.mu.Unlock()
	x.t.Error(msg)
}

// tally adds a run to the report's numbers.
func (x *explorer) tally(p params, out *outcome) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.runs++
	x.ops += out.ops
	x.acquisitions += out.acquisitions
	x.checks += out.checks
	x.starved += out.starved
	x.unmade += out.unmade
	for k, n := range out.injected {
		x.injected[k] += n
	}
	if p.expectsOverlap() {
		x.labelled++
		x.labelledOverlaps += out.overlaps
	}
}

// shrink looks for a smaller run that fails the same way: fewer clients,
// fewer operations, fewer fault and lock kinds, one server.
func (e *servers) shrink(out *outcome) *outcome {
	best := out
	budget := time.Now().Add(2 * time.Minute)
	for changed := true; changed && time.Now().Before(budget); {
		changed = false
		for _, p := range smaller(best.params) {
			if time.Now().After(budget) {
				break
			}
			o := e.run(p)
			if len(o.violations) > 0 && o.class() == out.class() {
				best, changed = o, true
				break
			}
		}
	}
	return best
}

// smaller lists the runs one step smaller than p.
func smaller(p params) []params {
	var out []params
	with := func(f func(q *params)) {
		q := p
		q.Kinds, q.Faults = slices.Clone(p.Kinds), slices.Clone(p.Faults)
		f(&q)
		out = append(out, q)
	}
	if p.Clients > 2 {
		with(func(q *params) { q.Clients = max(2, q.Clients/2) })
		with(func(q *params) { q.Clients-- })
	}
	if p.Ops > 1 {
		with(func(q *params) { q.Ops = max(1, q.Ops/2) })
		with(func(q *params) { q.Ops-- })
	}
	for i := range p.Faults {
		with(func(q *params) { q.Faults = slices.Delete(q.Faults, i, i+1) })
	}
	for i := range p.Kinds {
		if len(p.Kinds) > 1 {
			with(func(q *params) { q.Kinds = slices.Delete(q.Kinds, i, i+1) })
		}
	}
	if p.Cluster {
		with(func(q *params) { q.Cluster = false })
	}
	return out
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

func (x *explorer) finish() {
	// A kind with a dot is a detail of a fault (crash.held: holders that
	// died holding; evict.keys: keys evicted), not a fault of its own.
	var faults, details []string
	for k, n := range x.injected {
		if strings.Contains(k, ".") {
			details = append(details, fmt.Sprintf("%s %d", k, n))
		} else {
			faults = append(faults, fmt.Sprintf("%s %d", k, n))
		}
	}
	slices.Sort(faults)
	slices.Sort(details)
	took := time.Since(x.started)
	report := fmt.Sprintf("explorer: %d runs in %v, %d operations (%.1f a second), %d acquisitions, %d checks; faults injected: %s (details: %s); "+
		"%d labelled runs (FLUSHALL, restart of a standalone server, eviction, forced cluster failover) with %d overlaps, the documented failure; "+
		"%d leases lost or returned lost, and i/o timeouts, to a starved process; %d failovers the Sentinel would not make (NOGOODSLAVE, the harness's); %d failing runs",
		x.runs, took.Round(time.Second), x.ops, float64(x.ops)/took.Seconds(), x.acquisitions, x.checks, strings.Join(faults, ", "),
		strings.Join(details, ", "), x.labelled, x.labelledOverlaps, x.starved, x.unmade, len(x.failures))
	x.t.Log(report)
	if *exploreReport != "" {
		body := "# Explorer report\n\n" + report + "\n"
		for _, f := range x.failures {
			body += "\n```\n" + f + "\n```\n"
		}
		if err := os.WriteFile(*exploreReport, []byte(body), 0o644); err != nil {
			x.t.Error(err)
		}
	}
}

// logSchedule logs what a run will do, drawn from its params, as a
// failing run's triage needs it: each client's process and operations,
// and every fault with its time.
func logSchedule(t *testing.T, p params) {
	s := makeSchedule(p)
	for c, ops := range s.ops {
		t.Logf("client %d (process %d):", c, s.process[c])
		for i, o := range ops {
			t.Logf("  op %d: %+v", i, o)
		}
	}
	for _, f := range s.server {
		t.Logf("server fault: %+v", f)
	}
	for _, f := range netSchedule(p) {
		t.Logf("network fault: %+v", f)
	}
	for _, c := range s.crashes {
		t.Logf("crash: %+v", c)
	}
	for _, m := range s.migrations {
		t.Logf("migration: %+v", m)
	}
	for _, f := range s.failovers {
		t.Logf("failover: %+v", f)
	}
	for _, f := range s.clusterFailovers {
		t.Logf("cluster failover: %+v", f)
	}
	for _, su := range s.suspended {
		t.Logf("suspension: %+v", su)
	}
	if s.child != nil {
		t.Logf("child: %+v", *s.child)
	}
}
