//go:build faults

package faults

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/dlockio/dlock/internal/family"
)

// params is what a schedule is made from: the same params make the same
// schedule. Shrinking a failure means finding smaller params that still
// fail, so every field is one a smaller value of makes a smaller run.
type params struct {
	Seed    uint64
	Clients int      // 2–16 dlock Clients, each with its own connections
	Ops     int      // operations per client
	Kinds   []string // lock kinds the clients use (see lockKinds)
	Faults  []string // fault kinds injected (see faultKinds); none: a fault-free run
	Cluster bool     // a 3-master cluster rather than one server
}

// lockKinds are the operations a client picks from: the family on the
// run's server or cluster, and a Redlock on three independent masters of
// its own (redlockMasters).
var lockKinds = family.Kinds()

// earlyKinds is how many of lockKinds the first seeds drew from, in one
// stream; each kind after them is drawn from a stream of its own (see
// drawLater), so that a kind added keeps every seed's other draws.
const earlyKinds = 8

// faultKinds are the faults a schedule injects, by layer:
//
//	command level (a go-redis hook on every client, on real traffic):
//	  delay    a command waits before it is sent
//	  lost     a command is applied, its reply lost (the caller sees a timeout)
//	  late     as lost, and a copy arrives again later on another connection
//	           (as go-redis's own retry after a read timeout sends it); on
//	           acquires, more often, and mostly as an echo (see
//	           commandFaults.echo): the caller gets the resent copy's reply,
//	           the first copy lands shortly before or after it, or just
//	           before a waiting call gives up
//	  retry    as lost, and the caller gets the reply to a copy sent again
//	           (go-redis's retry, seen from the caller)
//	  drop     a command never reaches the server
//	server:
//	  pause    SIGSTOP one node, SIGCONT it later
//	  scriptflush  SCRIPT FLUSH on every node
//	  flushall FLUSHALL: every lock and counter lost (documented failure)
//	  restart  kill one node and start it again on its port, empty: on the
//	           run's one server, its locks lost (documented failure); on
//	           a Redlock master, kept out of the vote by the restart guard
//	           (no failure); not on a cluster's nodes
//	network (Toxiproxy between the clients and the run's server, or each
//	node of its cluster, and each Redlock master; see explore_network_test.go):
//	  network  one node's link at a time, for a while: latency, jitter, a
//	           bandwidth limit, resets (reset_peer), or nothing through
//	           (timeout); a cluster's clients dial each node through its
//	           proxy (a go-redis Dialer), whatever address MOVED names
//	server, labelled (see explore_evict_test.go):
//	  evict    a tiny maxmemory with an evicting policy and a filler on the
//	           run's one server: held locks vanish (documented failure);
//	           not on a cluster
//	client:
//	  freeze   a holder stops past its TTL, then writes with its token
//	  extend   holders Extend their leases, shorter and longer
//	  crash    one process killed at a random point, mid-command included
//	           (explore_crash_test.go): its connections close, it never
//	           sends again; its locks must free by their TTL, waiters get
//	           them within it, and a write it had on its way to a fenced
//	           store is refused if anyone held the lock since
//	topology (explore_topology_test.go):
//	  migrate  on a cluster, a lock's slot moves to another master and
//	           back, keys in batches, while clients hold and contend (ASK,
//	           TRYAGAIN on scripts whose keys are split); not labelled
//	  failover on a standalone run, the server is a Sentinel's master
//	           with one replica and the clients use WithReplicaAck
//	           (explore_failover_test.go): once or twice the master is
//	           killed, sometimes with its replica fallen behind, and the
//	           Sentinel promotes the replica; not labelled (every hold
//	           returned was on the replica); not with restart, evict or
//	           network, whose node is the one server; no CI seed draws it
//	  cfailover  on a cluster run, the cluster has a replica per master
//	           (explore_cfailover_test.go), and once or twice the master of
//	           one of the run's locks hands its slots to its replica with a
//	           graceful CLUSTER FAILOVER: nothing lost, not labelled; not
//	           with pause or migrate, whose nodes a failover swaps
//	  ctakeover  as cfailover, forced: the replica cut off its master for
//	           0.2–1.5 s first, then CLUSTER FAILOVER FORCE or TAKEOVER:
//	           what the master applied since is lost, and the clients ask
//	           no WithReplicaAck (labelled, as FLUSHALL is)
//	client, again:
//	  suspend  one process's machine suspended past its leases' TTLs
//	           (explore_suspend_test.go): its clock stands still, its
//	           commands and holders wait; once resumed, its monotonic
//	           clock lags, its wall clock does not; its leases must say
//	           lost; not with crash; no CI seed draws it
//	  child    one more client, in a child process of its own (the test
//	           binary again), SIGKILLed mid-script, holding, waiting or at
//	           a time, and at times SIGSTOPped past a TTL first
//	           (explore_child_test.go); not with a failover, of a Sentinel
//	           or a cluster; no drawn CI seed draws it
//	  slowobserver  every process's Observer is slow to be told renewals,
//	           and at times blocks (explore_slowobserver_test.go): no
//	           lease may be lost for it; no drawn CI seed draws it
//	command level, again:
//	  latefirst  with late, some echoes of a waiting call's attempt that
//	           registers nothing land only once the call has waited, before
//	           its next attempt or its abandon (explore_latefirst_test.go):
//	           none of the call's registrations may be left once that
//	           attempt was granted or the abandon applied; no CI seed draws it
//	server, again:
//	  rlfailover  the Redlock's master 0 is a Sentinel's master with a
//	           replica, reached through failover clients, and is failed over
//	           once or twice (explore_rlfailover_test.go): the restart guard
//	           keeps it out of the vote; not labelled; no CI seed draws it
var faultKinds = []string{"delay", "lost", "late", "retry", "drop", "pause", "scriptflush", "flushall", "freeze", "extend", "restart", "crash", "migrate", "network", "evict", "failover", "cfailover", "ctakeover", "suspend", "child", "slowobserver", "latefirst", "rlfailover"}

// quietFaults are the faults that cost no lease that a run's checks do not
// account for (see quiet in explore_run_test.go).
var quietFaults = []string{"extend", "scriptflush", "pause"} // and crash, drawn later: it costs only the dead process's leases

func (p params) has(fault string) bool { return slices.Contains(p.Faults, fault) }

// expectsOverlap reports whether the run is labelled: its faults are
// outside what dlock promises for some of its locks, which may then have
// two holders at once (docs/SAFETY.md says which and why); the run checks
// that fencing still catches them.
func (p params) expectsOverlap() bool {
	return slices.ContainsFunc(p.Kinds, func(k string) bool { return p.overlapDocumented(k, k) })
}

// overlapDocumented reports whether holds of kinds a and b may overlap in
// this run as documented: FLUSHALL empties every node, a Redlock's too;
// a restart without persistence empties the one server of a standalone
// run, but only one of a Redlock's masters, which the restart guard keeps
// out of the vote; a forced cluster failover loses what its master
// applied since its replica was cut off (no WithReplicaAck), but no
// Redlock master's.
func (p params) overlapDocumented(a, b string) bool {
	if p.has("flushall") || p.has("evict") && !p.Cluster && a != "redlock" && b != "redlock" {
		return true
	}
	if p.has("ctakeover") && p.Cluster && a != "redlock" && b != "redlock" { // a failover that lost writes
		return true
	}
	return p.has("restart") && !p.Cluster && a != "redlock" && b != "redlock"
}

// unlockMayFail reports whether an Unlock of kind may fail although the
// lease had time to spare when it began: a stalled server, a frozen
// client, a flushed or restarted server, a hold lost with a forced
// cluster failover; and for a Redlock, any command
// fault, as each master has its node timeout (10-60 ms here) to answer
// and is not asked again. Elsewhere an Unlock of a lease with time to
// spare must succeed, resent or not.
func (p params) unlockMayFail(kind string) bool {
	if kind == "redlock" && p.has("rlfailover") { // node 0 unreachable until the promotion
		return true
	}
	if kind == "redlock" && slices.ContainsFunc(p.Faults, func(f string) bool {
		return slices.Contains([]string{"delay", "lost", "late", "retry", "drop"}, f)
	}) {
		return true
	}
	return p.has("pause") || p.has("freeze") || p.has("flushall") || p.has("restart") || (p.has("evict") || p.has("ctakeover")) && kind != "redlock"
}

// String is the flags that replay the run.
func (p params) String() string {
	faults := strings.Join(p.Faults, ",")
	if faults == "" {
		faults = "none"
	}
	return fmt.Sprintf("-explore.seed=%d -explore.clients=%d -explore.ops=%d -explore.kinds=%s -explore.faults=%s -explore.cluster=%v",
		p.Seed, p.Clients, p.Ops, strings.Join(p.Kinds, ","), faults, p.Cluster)
}

// randomParams draws the params of a run from seed: which kinds, faults and
// sizes. CI runs a few of them; a soak many.
func randomParams(seed uint64, maxClients int) params {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	p := params{Seed: seed, Clients: 2 + rng.IntN(maxClients-1), Ops: 4 + rng.IntN(12), Cluster: rng.IntN(4) == 0}
	early := lockKinds[:earlyKinds] // redlock and later kinds are drawn later
	for _, k := range early {
		if rng.IntN(2) == 0 {
			p.Kinds = append(p.Kinds, k)
		}
	}
	if len(p.Kinds) == 0 {
		p.Kinds = []string{early[rng.IntN(len(early))]}
	}
	if rng.IntN(3) == 0 {
		// A third of the runs are quiet: nothing that may cost a lease (an
		// Extend, SCRIPT FLUSH, a pause of a cluster node that holds none
		// of it), so any loss there is a bug. On a cluster, most pause a
		// node: a stalled node must cost the others nothing.
		for _, f := range quietFaults {
			if (rng.IntN(2) == 0 || f == "pause" && rng.IntN(2) == 0) && (f != "pause" || p.Cluster) {
				p.Faults = append(p.Faults, f)
			}
		}
		p.drawLater(seed, true)
		return p
	}
	for _, f := range faultKinds[:slices.Index(faultKinds, "restart")] { // restart and later kinds are drawn later
		if rng.IntN(3) == 0 {
			p.Faults = append(p.Faults, f)
		}
	}
	p.drawLater(seed, false)
	return p
}

// drawLater draws the kinds added after the first seeds were chosen
// (redlock, restart) from a stream of their own, so that every seed keeps
// the other kinds, faults and sizes it had; the stream's key is one under
// which the CI seeds that caught a reverted fix (faults/RESULTS.md) draw
// neither, so that they keep their schedules too. A Redlock comes in a
// third of the runs, a restart in a quarter of those that are not quiet;
// each lock kind after Redlock in a third, from a stream of its own.
func (p *params) drawLater(seed uint64, quiet bool) {
	rng := rand.New(rand.NewPCG(seed, 0x1f67))
	for i, k := range lockKinds[earlyKinds:] {
		draw := rng
		if i > 0 {
			draw = rand.New(rand.NewPCG(seed, 0x1f67+uint64(i)))
		}
		if draw.IntN(3) == 0 && !slices.Contains(p.Kinds, k) {
			p.Kinds = append(p.Kinds, k)
		}
	}
	if rng.IntN(4) == 0 && !quiet {
		p.Faults = append(p.Faults, "restart")
	}
	p.drawCrash(seed)   // a stream of its own
	p.drawMigrate(seed) // and another
	p.drawNetwork(seed, quiet)
	p.drawFailover(seed) // once the faults it excludes are known
	p.drawClusterFailover(seed, quiet)
	p.drawSuspend(seed) // a stream of its own, once crash is known
	p.drawChild(seed)   // once the failovers, which exclude it, are known
	p.drawSlowObserver(seed)
	p.drawLateFirst(seed)
	p.drawRedlockFailover(seed) // last: it excludes most faults of a Redlock master
}

// op is one operation of a client's loop.
type op struct {
	Kind    string
	Names   []string      // the lock's name (several for a multi)
	TTL     time.Duration // the hold's TTL
	Lease   time.Duration // a fixed lease time (no renewals); 0: renewed
	Try     bool          // TryLock: one attempt
	Wait    time.Duration // Lock's wait bound
	Cancel  time.Duration // cancel the Lock after this long (0: never)
	Hold    time.Duration // how long to hold before unlocking
	Extend  time.Duration // Extend to this TTL half way through the hold (0: none)
	Freeze  bool          // stop past the TTL, then write with the token without looking
	Unlock2 bool          // unlock twice
}

// schedule is a run: every client's operations and the server faults'
// times, all drawn from params.
type schedule struct {
	params
	ops    [][]op
	server []serverFault // in time order
	names  map[string][]string
	// process is each client's process: clients of one process share a
	// go-redis client and a dlock Client (and so its renewals), as
	// goroutines of one program do. Without sharing, each its own.
	process    []int
	crashes    []crash     // processes killed (explore_crash_test.go)
	migrations []migration // slots moved (explore_topology_test.go)
	failovers  []failover  // masters killed and replicas promoted (explore_failover_test.go)
	// cluster masters failed over to their replicas (explore_cfailover_test.go)
	clusterFailovers []clusterFailover
	suspended        []suspend // processes' machines suspended (explore_suspend_test.go)
	child            *childRun // a client in a child process, killed for real (explore_child_test.go); nil in most runs
}

type serverFault struct {
	At   time.Duration // after the run's start
	Kind string        // pause, scriptflush, flushall, restart
	Node int           // which node (pause, restart)
	For  time.Duration // how long (pause)
}

// namesOf are the names each lock family contends on: kinds that share a
// layout share names, so they exclude one another (a MultiLock's locks are
// Mutexes; a ReentrantMutex is an RWMutex's write side).
func namesOf(seed uint64) map[string][]string {
	family := func(f string, n int) []string {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("x%d:%s%d", seed, f, i)
		}
		return names
	}
	m, rw := family("m", 3), family("rw", 2)
	names := map[string][]string{
		"mutex": m, "multi": m, "reentrant": rw, "rw.read": rw, "rw.write": rw,
		"fair": family("fair", 2), "semaphore": family("sem", 1), "election": family("elect", 1),
		"redlock": family("rl", 2),
	}
	for _, k := range lockKinds { // a kind added later: names of its own
		if names[k] == nil {
			names[k] = family(k, 1)
		}
	}
	return names
}

// pauseGap is how long a paused node runs before it is paused again.
const pauseGap = 300 * time.Millisecond

// semaphorePermits is every explored semaphore's size.
const semaphorePermits = 2

func makeSchedule(p params) *schedule {
	rng := rand.New(rand.NewPCG(p.Seed, 1))
	s := &schedule{params: p, names: namesOf(p.Seed)}
	s.ops = make([][]op, p.Clients)
	for c := range s.ops {
		for range p.Ops {
			s.ops[c] = append(s.ops[c], s.randomOp(rng))
		}
	}
	// Half of the runs (every one that pauses a cluster node) put their
	// clients in processes of two or three, which share a Client: its
	// renewals then carry leases on several nodes at once. (Not with frozen
	// holders: a frozen process would freeze every client of it, whose
	// losses the checks do not follow.)
	share := (rng.IntN(2) == 0 || p.has("pause") && p.Cluster) && !p.has("freeze")
	s.process = make([]int, p.Clients)
	for c, proc := 0, 0; c < p.Clients; proc++ {
		size := 1
		if share {
			size = 2 + rng.IntN(2)
		}
		for ; size > 0 && c < p.Clients; size-- {
			s.process[c] = proc
			c++
		}
	}
	// Server faults fall within the first seconds, while clients contend.
	// A pause lasts up to 850 ms: past a third of most TTLs, short of the
	// cluster's node timeout (1 s), which would take the cluster down.
	for _, kind := range []string{"pause", "scriptflush", "flushall", "restart"} {
		if !p.has(kind) {
			continue
		}
		// A run's pauses stop one node, again and again, while long holds
		// are under way: the locks of the other nodes must lose nothing.
		n, within, node := 1+rng.IntN(2), 1500, rng.IntN(3)
		if kind == "pause" {
			n, within = 1+rng.IntN(3), 3000
		}
		for range n {
			s.server = append(s.server, serverFault{
				At: time.Duration(100+rng.IntN(within)) * time.Millisecond, Kind: kind,
				Node: node, For: time.Duration(100+rng.IntN(750)) * time.Millisecond,
			})
		}
	}
	slices.SortFunc(s.server, func(a, b serverFault) int { return int(a.At - b.At) })
	if p.has("failover") {
		// Half the Sentinel's down-after: a pause must not make a
		// failover of its own, which the run's checks do not follow.
		for i := range s.server {
			s.server[i].For = min(s.server[i].For, sentinelPauseBound)
		}
	}
	// A paused node runs for pauseGap between two pauses: pauses back to
	// back would stop it past the cluster's node timeout.
	var free time.Duration
	for i, f := range s.server {
		if f.Kind != "pause" {
			continue
		}
		s.server[i].At = max(f.At, free)
		free = s.server[i].At + f.For + pauseGap
	}
	slices.SortFunc(s.server, func(a, b serverFault) int { return int(a.At - b.At) })
	s.crashes = drawCrashes(p, s.process)
	s.migrations = drawMigrations(p, s.names)
	s.failovers = drawFailovers(p)
	s.clusterFailovers = drawClusterFailovers(p, s.names)
	s.suspended = drawSuspensions(p, s.ops, s.process)
	s.child = drawChildRun(s) // last: its client and process come after the others
	return s
}

// longestTTL bounds every hold's TTL a run draws (randomOp: 300 ms and
// up to 2.7 s more; an Extend draws shorter ones): the settled checks
// wait it out.
const longestTTL = 3 * time.Second

func (s *schedule) randomOp(rng *rand.Rand) op {
	kind := s.Kinds[rng.IntN(len(s.Kinds))]
	// On a cluster, MultiLocks across slots come often: their waits for a
	// later slot are what a fixed lease can run out in.
	if s.Cluster && slices.Contains(s.Kinds, "multi") && !s.has("pause") && rng.IntN(3) == 0 {
		kind = "multi"
	}
	names := s.names[kind]
	o := op{Kind: kind, Names: []string{names[rng.IntN(len(names))]}}
	if kind == "multi" {
		o.Names = pick(rng, names, 2+rng.IntN(len(names)-1))
	}
	o.TTL = time.Duration(300+rng.IntN(2700)) * time.Millisecond // up to longestTTL
	if (s.has("pause") || s.has("suspend")) && rng.IntN(3) != 0 {
		o.TTL = time.Duration(400+rng.IntN(700)) * time.Millisecond // a pause outlasts its renewal's margin; a suspension its TTL, soon
	}
	if (s.has("failover") || s.has("rlfailover")) && rng.IntN(2) == 0 {
		// Renewed while the replica is cut off, and lasting past the
		// promotion (1.1 s after the kill): a renewal lost with the
		// master must not have moved the lease's deadline.
		o.TTL = time.Duration(1500+rng.IntN(1500)) * time.Millisecond
	}
	if rng.IntN(4) == 0 && kind != "election" && (!s.has("pause") || rng.IntN(2) == 0) {
		o.Lease = time.Duration(300+rng.IntN(1200)) * time.Millisecond // pauses: mostly renewed leases
	}
	// A MultiLock across slots with a fixed lease time waits for a later
	// slot's lock longer than that lease, often: an earlier part runs out
	// meanwhile.
	crossSlot := kind == "multi" && s.Cluster && !s.has("pause")
	if crossSlot && rng.IntN(3) != 0 {
		o.Lease = time.Duration(300+rng.IntN(300)) * time.Millisecond
	}
	switch rng.IntN(4) {
	case 0:
		o.Try = true
	case 1:
		o.Cancel = time.Duration(rng.IntN(400)) * time.Millisecond
		fallthrough
	default:
		o.Wait = time.Duration(1+rng.IntN(3)) * time.Second
	}
	o.Hold = time.Duration(rng.IntN(10)) * time.Millisecond // mostly short: many hand-overs
	long := 1                                               // in 8
	if s.Cluster && slices.Contains(s.Kinds, "multi") {
		long = 3 // holds that outlast a MultiLock's fixed lease
	}
	if s.has("pause") || s.has("failover") || s.failsOverCluster() || s.has("suspend") || s.has("latefirst") || s.has("rlfailover") {
		long = 4 // holds that outlast a stalled node, a failover, a first attempt's read timeout, or span a suspension
	}
	switch r := rng.IntN(8); {
	case r < 2:
		o.Hold = time.Duration(rng.IntN(300)) * time.Millisecond // long enough to renew, be waited for
	case r < 2+long:
		o.Hold = time.Duration(300+rng.IntN(1200)) * time.Millisecond // past a fixed lease, or another's wait
		if s.Cluster && slices.Contains(s.Kinds, "multi") {
			o.Hold = time.Duration(600+rng.IntN(1200)) * time.Millisecond // past a MultiLock's fixed lease
		}
		if (s.has("pause") || s.has("suspend")) && rng.IntN(3) != 0 {
			o.Hold = time.Duration(1000+rng.IntN(1500)) * time.Millisecond // across a pause, or a suspension
		}
		if s.has("latefirst") && rng.IntN(2) == 0 {
			o.Hold = time.Duration(1000+rng.IntN(1500)) * time.Millisecond // a waiter's first attempt, held up a read timeout, still refused
		}
		if (s.has("failover") || s.has("rlfailover")) && rng.IntN(3) != 0 {
			o.Hold = time.Duration(1500+rng.IntN(2500)) * time.Millisecond // from before a replica is cut off to past the promotion
		}
	}
	if crossSlot && o.Lease > 0 {
		// A Lock that waits long enough to outwait its fixed lease.
		o.Try, o.Cancel, o.Wait = false, 0, max(o.Wait, 2*time.Second)
	}
	if s.has("extend") && o.Lease == 0 && rng.IntN(2) == 0 {
		o.Extend = time.Duration(300+rng.IntN(300)) * time.Millisecond // shorter, mostly
		if rng.IntN(3) == 0 {
			o.Extend = time.Duration(300+rng.IntN(1400)) * time.Millisecond
		}
	}
	o.Freeze = s.has("freeze") && rng.IntN(8) == 0
	o.Unlock2 = rng.IntN(6) == 0
	return o
}

func pick(rng *rand.Rand, from []string, n int) []string {
	perm := rng.Perm(len(from))[:n]
	out := make([]string, n)
	for i, j := range perm {
		out[i] = from[j]
	}
	return out
}
