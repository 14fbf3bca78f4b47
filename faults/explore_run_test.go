//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/faults/linear"
	"github.com/dlockio/dlock/internal/clock"
	"github.com/dlockio/dlock/internal/family"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
)

// exploreEnv is where a schedule runs: its nodes, and how to reach them.
type exploreEnv struct {
	nodes   []*redistest.Server
	cluster bool
	redlock []*redistest.Server // the Redlock's masters; nil in a run without Redlocks
	slots   *redistest.Cluster  // the cluster, to move slots on (explore_topology_test.go); nil standalone
	via     map[string]string   // a node's address to its proxy's (see startNetwork)
	// failover is a failover run's Sentinel, master and replica
	// (explore_failover_test.go); nodes then holds the first master. Nil
	// in other runs.
	failover *failoverEnv
	// cfail is a cluster failover run's (explore_cfailover_test.go); nodes
	// then holds the masters, replicas their replicas. Nil in other runs.
	cfail    *clusterFailovers
	replicas []*redistest.Server
	// rlFailover is a rlfailover run's Redlock node 0
	// (explore_rlfailover_test.go); redlock[0] is then its first master.
	// Nil in other runs.
	rlFailover *failoverEnv
	// a ClusterClient's dials to a node with no proxy, and through one, in
	// a run that proxies the cluster's nodes (see startNetwork)
	strays, dials *atomic.Int64
}

func (e *exploreEnv) newRedis() redis.UniversalClient {
	if e.failover != nil {
		return e.failover.newRedis()
	}
	if e.cluster {
		addrs := make([]string, len(e.nodes))
		for i, n := range e.nodes {
			addrs[i] = n.Addr()
		}
		opts := &redis.ClusterOptions{Addrs: addrs, Username: aclUser, Password: aclPassword,
			DialTimeout: time.Second, ReadTimeout: readTimeout, WriteTimeout: time.Second,
			MaxRetries: -1, ContextTimeoutEnabled: true}
		if e.via != nil {
			// Every node's connections through its proxy: the address
			// dialled is the one the cluster names (CLUSTER SLOTS, MOVED),
			// the node's own, and the proxy is picked by it.
			opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
				to := e.dial(addr)
				if to == addr {
					e.strays.Add(1)
				} else {
					e.dials.Add(1)
				}
				var d net.Dialer
				return d.DialContext(ctx, network, to)
			}
		}
		return redis.NewClusterClient(opts)
	}
	return newRedisAt(e.dial(e.nodes[0].Addr()))
}

// newRedisAt is an explored client's connection to one standalone server.
func newRedisAt(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Username: aclUser, Password: aclPassword,
		DialTimeout: time.Second, ReadTimeout: readTimeout, WriteTimeout: time.Second,
		MaxRetries: -1, ContextTimeoutEnabled: true})
}

// process is what the clients of one process share, as goroutines of one
// program do: a dlock Client (and so its renewals), a Redlock over
// connections of its own to the masters, and the fault hooks on each.
type process struct {
	client    *dlock.Client
	redlock   *dlock.Redlock    // nil in a run without Redlocks
	hook      *commandFaults    // on the Client's connections
	renewals  *redlockRenewals  // what came of the Redlock's renewals, shared by the run's processes
	nodeHooks []*commandFaults  // on the Redlock's, one per master
	crash     *crashState       // its death, if it dies (explore_crash_test.go)
	failover  *failoverEnv      // the run's failovers; nil in other runs
	cfail     *clusterFailovers // the run's cluster failovers; nil in other runs
	clock     *clock.Clock      // its own, in a suspend run (explore_suspend_test.go); nil: the machine's
	suspended *suspendState     // its suspension as its holders see it, in a suspend run; nil in others
	// slowIsStarved: its commands' slow round trips tell of starvation,
	// the run having no fault that slows a server or the way to one
	// (explore_starve_test.go)
	slowIsStarved bool
	// servers: its run's servers' run-queue waits, counted in every run
	// (explore_schedstat_test.go); nil: none measured
	servers *serverStalls
	// renewed: what came of its Client's leases' renewals, for an
	// unexplained loss to tell (explore_renewals_test.go)
	renewed *leaseRenewals
	// trace: its Client's last commands, and rdb its connections, for an
	// unexplained loss to tell (explore_trace_test.go)
	trace *commandTrace
	rdb   redis.UniversalClient
}

// freeze stops every command of the process for d from now, as SIGSTOP
// would: the Redlock's too.
func (p *process) freeze(d time.Duration) {
	p.hook.freeze(d)
	for _, h := range p.nodeHooks {
		h.holdBack(d)
	}
}

// fencedStores are the resources the locks protect, one per lock name:
// each accepts a write whose token is at least the highest it accepted,
// as a store that trusts fencing tokens does.
type fencedStores struct {
	mu      sync.Mutex
	highest map[string]uint64
}

func (f *fencedStores) write(name string, token uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if token < f.highest[name] {
		return false
	}
	f.highest[name] = token
	return true
}

// staleWrite is a write a frozen holder made when it woke, without looking
// at its lease: the fenced store must refuse it if anyone held the lock
// since.
type staleWrite struct {
	client   int
	name     string
	token    uint64
	at       time.Time
	accepted bool
}

// hold is one acquisition as its holder saw it.
type hold struct {
	client int
	kind   string
	tokens map[string]uint64
	asked  time.Time // the acquire was called
	start  time.Time // it returned the lease
	// fenced: its first write with its token reached the fenced store, at
	// once for an in-process holder, when the parent read it for the
	// child's (explore_child_test.go); zero if none did
	fenced  time.Time
	end     time.Time // the holder stopped counting on it: unlock, or its deadline if lost first
	lost    bool      // the lease ended lost
	fixed   bool      // a fixed lease time, held past it on purpose
	frozen  bool
	crashed bool // its process died while it held (explore_crash_test.go)
	invalid bool // returned with no validity left
	stale   []staleWrite

	loss error // how the lease was lost, as it told (Lease.Err); nil if it was not
	// quorumMissed: a Redlock's lease, lost as a Redlock loses one
	// whatever the run's faults (see quorumMissed); lastRenewal is how its
	// last failed renewal failed
	quorumMissed bool
	lastRenewal  error
	// starved: how long its process was starved (explore_starve_test.go)
	// in the last ttl before its deadline, if it was lost, or before it
	// was returned, if returned lost
	starved time.Duration
	ttl     time.Duration
	// goroutinesWaited: the longest, in that ttl, the explorer's
	// goroutines waited to run (explore_schedlat_test.go), not the sum:
	// a wait per tick would cover the ttl; it explains no loss
	goroutinesWaited time.Duration
	// renewalFailed: a renewal of its lease, in its last ttl, that came
	// back with an error sooner than any timeout of dlock's could fire
	// (quickFailure), which starvation does not explain; "" if none
	renewalFailed string
	// measure sets starved, goroutinesWaited and renewalFailed when the run is checked:
	// the kernel counts a wait, and a probe or a command its stall, when
	// it ends, which may be after the deadline
	measure func(*hold)
	// howLost tells, if it was lost, what came of its last renewals
	// (explore_renewals_test.go), and of its commands in its last two
	// TTLs (explore_trace_test.go), read when the run is checked: a
	// renewal that timed out at the deadline is told just after it
	howLost func() string
	// deadline: its lease's, in real time, if it was lost; lossSeen: when
	// the holder first saw it lost (the loss was then, or earlier)
	deadline, lossSeen time.Time
}

// lossTold is howLost's, or nothing.
func (h hold) lossTold() string {
	if h.howLost == nil {
		return ""
	}
	return h.howLost()
}

func (h hold) exclusive() bool { return kindOf(h.kind).Mode == family.Exclusive }

// kindOf is the family's kind called kind: an exclusive one for none.
func kindOf(kind string) family.Kind {
	k, _ := family.Of(observe.Kind(kind))
	return k
}

// empty: the hold's deadline passed before its holder could act on it,
// as when its process was suspended the moment its call returned (the
// call judged it valid; "returned lost" judges that): it held nothing
// another hold could overlap or follow.
func (h hold) empty() bool { return !h.end.After(h.start) }

// outcome is what a run found.
type outcome struct {
	params       params
	ops          int
	acquisitions int
	injected     map[string]int
	checks       int
	violations   []string
	overlaps     int           // in a labelled run, the documented failure
	settling     time.Duration // of the run's time, the checks after it
	notes        []string      // what a checker could not judge, and why
	starved      int           // holds lost, or returned lost, to a starved process (explore_starve_test.go)
	lossesJudged []lossJudged  // how checkHolds judged each loss no fault reaches
	unmade       int           // faults the harness could not make (failedFailover)
	linearizing  time.Duration // of the checks, porcupine's
}

// lossJudged is checkHolds's verdict on a loss no fault reaches: caught
// (unexplained), starved, or redlock (lost as a Redlock loses a lease).
type lossJudged struct {
	client  int
	verdict string
}

// starve notes a hold lost to its process's starvation.
func (o *outcome) starve(format string, args ...any) {
	o.starved++
	o.note(format, args...)
}

func (o *outcome) violate(format string, args ...any) {
	o.violations = append(o.violations, fmt.Sprintf(format, args...))
}

// class is the kinds of violation a run found, for shrinking: a smaller
// run must fail the same way.
func (o *outcome) class() string {
	kinds := map[string]bool{}
	for _, v := range o.violations {
		kinds[strings.SplitN(v, ":", 2)[0]] = true
	}
	out := make([]string, 0, len(kinds))
	for k := range kinds {
		out = append(out, k)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// runSchedule runs s on env and checks everything it recorded.
func runSchedule(env *exploreEnv, s *schedule) *outcome {
	out := &outcome{params: s.params, injected: map[string]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	var (
		mu          sync.Mutex
		holds       []hold
		errs        []string
		starvedErrs []string // errors a starved process explains
		double      []string
		waits       []failedWait // Locks that gave up (checkCrashes)
	)
	stores := &fencedStores{highest: map[string]uint64{}}
	rec := &leaseRecorder{start: time.Now(), undone: env.failover.mayBeUndone}
	network := startNetwork(env, s)
	defer network.stop()
	// The servers' run-queue waits, from now to the run's end: its
	// failovers' data nodes as they are at each tick.
	runQueues := startServerStalls(runServers(env))
	defer runQueues.close()
	resend := env.newRedis()
	defer resend.Close()
	resendTo := make([]redis.UniversalClient, len(env.redlock)) // a copy goes where its first went
	for i, n := range env.redlock {
		resendTo[i] = newRedisAt(n.Addr())
		if i == 0 && env.rlFailover != nil {
			resendTo[i] = env.rlFailover.newRedis()
		}
		defer resendTo[i].Close()
	}
	// One go-redis client, hook and dlock Client per process, and one
	// Redlock over connections (and hooks) of its own; a process's clients
	// share them.
	var hooks []*commandFaults
	renewals := newRedlockRenewals()
	procs := map[int]*process{}
	for c := range s.Clients {
		if procs[s.process[c]] != nil {
			continue
		}
		penv := network.env(env, s.process[c]) // its own links, when the run has network faults
		rdb := penv.newRedis()
		defer rdb.Close()
		p := &process{hook: newCommandFaults(s.Seed, c, s.Faults, resend), crash: newCrashState(), failover: env.failover, cfail: env.cfail, renewals: renewals, servers: runQueues}
		p.hook.failover, p.hook.cfail = env.failover, env.cfail
		p.hook.withhold = withholding() && c == 0
		if s.has("latefirst") {
			p.hook.firstRng = rand.New(rand.NewPCG(s.Seed, lateFirstStream+uint64(c)))
		}
		p.slowIsStarved = !slices.ContainsFunc(s.Faults, slowsServers)
		p.crash.conns = append(p.crash.conns, rdb)
		p.trace, p.rdb = newCommandTrace(), rdb
		rdb.AddHook(p.trace) // first, so outermost: what the Client saw
		rdb.AddHook(p.hook)
		hooks = append(hooks, p.hook)
		p.renewed = newLeaseRenewals()
		observer := &observe.Observer{Wait: observedInDoubt.Wait, Renewal: p.renewed.observe}
		if s.has("slowobserver") {
			observer.Renewal = slowRenewals(s.Seed, s.process[c], p.renewed.observe)
			observer.End = slowEnds(s.Seed, s.process[c])
		}
		client, err := dlock.New(rdb, append([]dlock.Option{dlock.WithWaiterRefresh(waiterRefresh), dlock.WithObserver(observer)}, env.failover.options()...)...)
		if err != nil {
			panic(err) // the options are the explorer's own
		}
		p.client = client
		defer client.Close()
		if env.redlock != nil {
			masters := make([]redis.UniversalClient, len(env.redlock))
			for i, n := range env.redlock {
				var node redis.UniversalClient = newRedisAt(penv.dial(n.Addr()))
				if i == 0 && env.rlFailover != nil {
					node = env.rlFailover.newRedis()
				}
				defer node.Close()
				// Each master's hook draws from a stream of its own.
				h := newCommandFaults(s.Seed, c+1000*(i+1), s.Faults, resendTo[i])
				if i == 0 {
					h.failover = env.rlFailover // its clean-ups may meet no master
				}
				if i == 2 && env.rlFailover != nil {
					h.unreachable = &env.rlFailover.isolated // as in issue 33's case: A holds on 0 and 1
				}
				h.withhold = p.hook.withhold
				node.AddHook(h)
				p.crash.conns = append(p.crash.conns, node)
				hooks = append(hooks, h)
				p.nodeHooks = append(p.nodeHooks, h)
				masters[i] = node
			}
			p.redlock = newExploredRedlock(masters, renewals)
		}
		if s.has("suspend") {
			p.useClock(append([]*commandFaults{p.hook}, p.nodeHooks...))
		}
		procs[s.process[c]] = p
	}
	child := startChild(ctx, env, s, stores, rec, procs) // nil in a run without one
	var wg sync.WaitGroup
	for c := range s.Clients {
		proc := procs[s.process[c]]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, o := range s.ops[c] {
				if proc.killed() {
					return
				}
				proc.awake()
				asked := time.Now()
				h, err, unlockErr := runOp(ctx, proc, stores, rec, c, i, o, !s.unlockMayFail(o.Kind))
				mu.Lock()
				if err != nil && !proc.killed() {
					waits = append(waits, failedWait{client: c, op: o, asked: asked, gaveUp: time.Now(), err: err})
				}
				if err != nil && !expectedAcquireError(err) && len(s.Faults) == 0 {
					// An i/o timeout is a read timeout's worth of waiting
					// for a reply: starvation, if that much of it was.
					gaveUp := time.Now()
					starved := proc.starved(later(asked, gaveUp.Add(-2*readTimeout)), gaveUp)
					if isTimeout(err) && starvedEnough(starved, readTimeout) {
						starvedErrs = append(starvedErrs, fmt.Sprintf("client %d op %d (%s): %v, its process starved %v of the %v before", c, i, o.Kind, err, starved, gaveUp.Sub(asked)))
					} else {
						errs = append(errs, fmt.Sprintf("client %d op %d (%s): %v, its process starved %v of the %v before", c, i, o.Kind, err, starved, gaveUp.Sub(asked)))
					}
				}
				if h != nil {
					holds = append(holds, *h)
				}
				if unlockErr != "" {
					double = append(double, unlockErr)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); killProcesses(ctx, s, procs, out) }()
	wg.Add(1)
	go func() { defer wg.Done(); migrateSlots(ctx, env, s, out) }()
	wg.Add(1)
	go func() { defer wg.Done(); suspendProcesses(s, procs, out) }()
	if env.failover != nil {
		wg.Add(1)
		go func() { defer wg.Done(); env.failover.failOver(ctx, s) }()
		watch, stopWatching := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() { defer close(watched); env.failover.watchSentinel(watch) }()
		defer func() { stopWatching(); <-watched }() // after the checks: a failover then counts too
	}
	if env.cfail != nil {
		wg.Add(1)
		go func() { defer wg.Done(); env.cfail.failOverCluster(ctx, s) }()
	}
	if env.rlFailover != nil {
		wg.Add(1)
		go func() { defer wg.Done(); env.rlFailover.failOver(ctx, s) }()
		watch, stopWatching := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() { defer close(watched); env.rlFailover.watchSentinel(watch) }()
		defer func() { stopWatching(); <-watched }()
	}
	network.inject(ctx)
	evicted := evictFaults(ctx, env, s)
	serverFaults(ctx, env, s, out)
	wg.Wait()
	child.finish(out, &holds, &waits, &double)
	env.failover.report(out)
	env.rlFailover.report(out)
	env.cfail.report(env, holds, out)
	network.wait(out)
	evicted(out)
	for _, h := range hooks {
		close(h.stop)
		h.late.Wait()
	}
	// Clean-ups dlock sent and did not wait for land (or fail, and make
	// their locks doubtful) before anything is judged.
	waitCleanUps(ctx, hooks)

	for _, h := range hooks {
		for k, n := range h.injected {
			out.injected[k] += n
		}
		for _, o := range h.orphaned {
			// A failover may take a tombstone with it, one its master
			// wrote and did not pass on: the copy's hold lasts its TTL, as
			// after a fault that hit the clean-up.
			if env.failover.mayBeUndone(o.voided, o.voided) || h.failover.mayBeUndone(o.voided, o.voided) {
				for _, n := range o.names {
					h.doubtful[n] = true
				}
			}
			// FLUSHALL, a restart, eviction and a forced cluster failover
			// take tombstones with them: that run's documented failure.
			if !s.has("flushall") && !s.has("restart") && !s.has("evict") && !s.has("ctakeover") && !slices.ContainsFunc(o.names, func(n string) bool { return h.doubtful[n] }) {
				out.violate("orphan: a late copy of an acquire of %v was granted after its call gave up: %s", o.names, o.reply)
			}
		}
	}
	for _, h := range hooks {
		for _, v := range h.leftBehind {
			out.violate("registration: %s", v)
		}
	}
	for _, sf := range s.server {
		out.injected[sf.Kind]++
	}
	for _, c := range s.ops {
		out.ops += len(c)
	}
	out.acquisitions = len(holds)
	for _, e := range errs {
		out.violate("error: %s", e)
	}
	for _, e := range starvedErrs {
		out.starve("%s", e)
	}
	for _, d := range double {
		out.violate("unlock: %s", d)
	}
	checkHolds(s, holds, pausedNames(ctx, env, s), out)
	tallyMutation(s, out)
	checkCrashes(s, procs, holds, waits, out)
	checkSuspensions(procs, out)
	child.checkFreed(holds, out)
	waitCrashedOut(ctx, s, procs)
	waitFailedOut(ctx, env, s)
	waitRedlockFailedOut(ctx, env, s)
	waitTakenOver(ctx, env, s)
	checkFencedOverlaps(s, holds, out)
	doubtful, lateOwners := map[string]bool{}, map[string]bool{}
	for _, h := range hooks {
		for name := range h.doubtful {
			doubtful[name] = true
		}
		for owner := range h.lateOwners {
			lateOwners[owner] = true
		}
	}
	linearizing := time.Now()
	checkLinearizable(s, rec, kindsOfNames(s), doubtful, out)
	out.linearizing = time.Since(linearizing)
	settling := time.Now()
	checkSettled(ctx, env, s, doubtful, lateOwners, out)
	out.settling = time.Since(settling)
	return out
}

// expectedAcquireError: refusals, the caller's own cancellation, and a
// Redlock's quorum missed (nodes slow under the load, or held).
func expectedAcquireError(err error) bool {
	var quorum *dlock.QuorumError
	return errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &quorum)
}

// runOp makes one operation: acquire, write with the token, hold (maybe
// frozen, maybe extended), unlock (maybe twice).
func runOp(ctx context.Context, proc *process, stores *fencedStores, rec *leaseRecorder, client, i int, o op, strictUnlock bool) (*hold, error, string) {
	owner := fmt.Sprintf("client %d op %d", client, i) // the model's: one per acquisition
	opts := []dlock.Option{dlock.WithTTL(o.TTL)}
	if o.Lease > 0 {
		opts = append(opts, dlock.WithLeaseTime(o.Lease))
	}
	if !o.Try {
		opts = append(opts, dlock.WithWait(o.Wait))
	} else if o.Kind == "election" {
		opts = append(opts, dlock.WithWait(0))
	}
	actx := ctx
	if o.Cancel > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, o.Cancel)
		defer cancel()
	}
	actx, inDoubt := withInDoubt(actx)
	asked := time.Now()
	lease, err := acquire(actx, proc, o, opts)
	if err == nil && inDoubt.Load() {
		rec.recordInDoubt(client, owner, o, asked, time.Now())
	}
	// Judged as the call returned it, on its process's clock: a
	// suspension that begins once it returned stops the holder, not dlock.
	returned := time.Now()
	returnedLost := err == nil && (lease.Err() != nil || proc.clock.Until(lease.Deadline()) <= 0)
	proc.awake() // a suspended process learns of it once it resumes
	if err != nil {
		rec.refused(client, owner, o, asked, proc.failedBy(time.Now()), err)
		return nil, err, ""
	}
	if proc.killed() { // the process died before it learnt of its lease, which holds until its deadline
		proc.awaitDeath()
		rec.acquired(client, owner, o, asked, time.Now(), lease, proc.deadline(lease))
		return nil, errKilled, ""
	}
	h := &hold{client: client, kind: o.Kind, tokens: lease.Tokens(), asked: asked, start: time.Now(),
		fixed: o.Lease > 0 && o.Hold >= o.Lease/2}
	h.ttl = heldTTL(o)
	if returnedLost {
		h.invalid = true
		ttl := h.ttl
		h.measure = func(h *hold) { h.starved = proc.starvedBefore(returned, ttl) }
	}
	for name, token := range h.tokens {
		stores.write(name, token) // the holder's first act: a write with its token
	}
	h.fenced = time.Now()
	var (
		extended  bool  // its Extend was called
		extendErr error // and returned this
	)
	switch {
	case o.Freeze:
		// A stopped process: nothing of this client reaches Redis, and the
		// holder acts on its own clock when it wakes.
		h.frozen = true
		proc.freeze(o.TTL + o.TTL/2)
		time.Sleep(o.TTL + o.TTL/2)
		proc.awake()
		for name, token := range h.tokens {
			h.stale = append(h.stale, staleWrite{client: client, name: name, token: token, at: time.Now(),
				accepted: stores.write(name, token)})
		}
	default:
		hold := o.Hold
		resumed := false // woken by its process's resume (explore_suspend_test.go)
		if o.Extend > 0 {
			// Extend, then hold past the new TTL: renewals must follow it.
			proc.sleep(lease, hold/2)
			h.sawLoss(lease)
			resumed = proc.resumeHolding(h, o, lease, stores)
			call := time.Now()
			extendErr = lease.Extend(ctx, o.Extend)
			extended = true
			rec.ended(client, owner, o, linear.Extend, call, time.Now(), extendErr)
			hold = o.Extend + o.Extend/2
		}
		proc.sleep(lease, hold)
		h.sawLoss(lease)
		if !resumed {
			proc.resumeHolding(h, o, lease, stores)
		}
	}
	h.end = time.Now()
	h.loss = lease.Err()
	h.lost = h.loss != nil
	h.sawLoss(lease)
	if h.lost && o.Kind == "redlock" {
		h.quorumMissed, h.lastRenewal = proc.renewals.explains(o.Names[0], lease.Token(), h.loss, redlockMasters)
	}
	if h.lost && !h.invalid {
		if extended {
			h.ttl = extendedTTL(h.ttl, o.Extend, extendErr)
		}
		d := proc.deadline(lease)
		h.deadline = d
		from := d.Add(-h.ttl)
		h.measure = func(h *hold) {
			h.starved = proc.starved(from, d)
			h.goroutinesWaited = longestStall(from, d, goroutineStalls())
			h.renewalFailed = proc.trace.quickFailure(slices.Collect(maps.Keys(h.tokens)), from, d)
		}
		h.howLost = func() string {
			names := slices.Collect(maps.Keys(h.tokens))
			return proc.renewed.before(h.tokens, h.start, d) + "; its commands:" + proc.trace.about(names, d.Add(-2*h.ttl), d) + "; " + poolWaits(proc.rdb)
		}
	}
	// A lease promises nothing past its deadline, whether or not its loss
	// was told yet (a loaded machine may run the renewer late).
	if d := proc.deadline(lease); d.Before(h.end) {
		h.end = d
	}
	if proc.killed() { // no Unlock: the process is dead, its hold lapses at its deadline
		proc.awaitDeath()
		rec.acquired(client, owner, o, asked, h.start, lease, proc.deadline(lease))
		return proc.crashedHold(h, o, stores), nil, ""
	}
	rec.acquired(client, owner, o, asked, h.start, lease, proc.deadline(lease)) // its deadline is final
	unlocked := time.Now()
	uerr := timedUnlock(ctx, rec, client, owner, o, lease)
	note := ""
	if refusedInTime(uerr, time.Now(), proc.deadline(lease)) && !h.lost && !h.frozen && !h.fixed && strictUnlock {
		note = fmt.Sprintf("client %d op %d (%s): Unlock of a lease that held to the end: %v", client, i, o.Kind, uerr)
	}
	if o.Unlock2 && uerr == nil { // after a failed Unlock, trying again may well release
		again := time.Now()
		err := timedUnlock(ctx, rec, client, owner, o, lease)
		// A failover may undo the first release (its master killed, or
		// on a cluster failed over by force, before the replica had it),
		// and leave none to answer the second.
		excused := err == nil && (proc.failover.mayBeUndone(unlocked, again) || proc.cfail.mayBeUndone(unlocked, again)) ||
			err != nil && (proc.failover.mayHaveFailed(again, time.Now()) || proc.cfail.mayHaveFailed(again, time.Now()))
		if !errors.Is(err, dlock.ErrNotHeld) && !excused {
			note = fmt.Sprintf("client %d op %d (%s): second Unlock returned %v, want ErrNotHeld", client, i, o.Kind, err)
		}
	}
	return h, nil, note
}

// refusedInTime reports whether an Unlock's answer says that the hold was
// gone while its lease still counted on it: ErrNotHeld, answered before the
// lease's deadline, so the release ran, and found nothing of its owner's
// (nor its mark), before then. It judges the answer, not the call: a
// release may wait in its Client before it is sent (queued behind the two
// round trips a Client's acquires and releases share, see dlock's
// coalescer, while a late copy's read timeout holds both up for a
// second), and one sent past the deadline rightly finds the hold gone.
// Whatever delay a fault puts on the release itself comes before its
// answer too.
func refusedInTime(err error, answered, deadline time.Time) bool {
	return errors.Is(err, dlock.ErrNotHeld) && answered.Before(deadline)
}

func acquire(ctx context.Context, proc *process, o op, opts []dlock.Option) (*dlock.Lease, error) {
	k, ok := family.Of(observe.Kind(o.Kind))
	if !ok {
		return nil, fmt.Errorf("unknown kind %q", o.Kind)
	}
	return k.Take(ctx, family.Target{Client: proc.client, Redlock: proc.redlock, Permits: semaphorePermits}, o.Names, o.Try, opts...)
}

// serverFaults runs the schedule's server faults at their times.
func serverFaults(ctx context.Context, env *exploreEnv, s *schedule, out *outcome) {
	start := time.Now()
	for _, f := range s.server {
		if sleepCtx(ctx, time.Until(start.Add(f.At))) != nil {
			return
		}
		// A node's fault hits the run's server or cluster node, and one
		// Redlock master; the others, every node. In a failover run, the
		// server is the master of the moment (none during a failover),
		// and every node is every data node running.
		nodes := env.nodes
		one := []*redistest.Server{env.nodes[f.Node%len(env.nodes)]}
		if env.failover != nil {
			var master *redistest.Server
			master, nodes = env.failover.current()
			one = []*redistest.Server{master}
			if master == nil {
				one = nil
			}
		}
		if env.cfail != nil { // every node: a replica refuses FLUSHALL, and gets it from its master
			masters, replicas := env.cfail.nodes()
			nodes = append(masters, replicas...)
		}
		if env.redlock != nil {
			one = append(one, env.redlock[f.Node%len(env.redlock)])
		}
		every := append(slices.Clone(nodes), env.redlock...)
		switch f.Kind {
		case "pause":
			for _, n := range one {
				n.Pause()
			}
			_ = sleepCtx(ctx, f.For)
			for _, n := range one {
				n.Resume()
			}
		case "restart":
			if env.cluster || env.failover != nil { // a cluster node restarted empty would leave the cluster; a failover run's are the failovers'
				one = slices.DeleteFunc(one, func(n *redistest.Server) bool { return !slices.Contains(env.redlock, n) })
			}
			for _, n := range one {
				n.Restart()
			}
		case "scriptflush":
			for _, n := range every {
				_ = n.Client().ScriptFlush(ctx).Err()
				_ = n.Client().FunctionFlush(ctx).Err()
			}
		case "flushall":
			for _, n := range every {
				_ = n.Client().FlushAll(ctx).Err()
			}
		}
	}
}

// checkHolds judges the holds: no two holders at once where the lock
// allows one (readers share; a semaphore allows its permits), tokens that
// only increase, no lease returned lost, and no loss in a fault-free run.
func checkHolds(s *schedule, holds []hold, paused map[string]bool, out *outcome) {
	byName := map[string][]hold{}
	for _, h := range holds {
		out.checks++
		if h.measure != nil {
			h.measure(&h)
		}
		if h.invalid {
			if starvedEnough(h.starved, h.ttl) {
				out.starve("client %d %s %v came back with no validity left, its process starved %v of the %v before", h.client, h.kind, h.tokens, h.starved, h.ttl)
			} else {
				out.violate("returned lost: client %d %s %v came back with no validity left, its process starved %v of the %v before", h.client, h.kind, h.tokens, h.starved, h.ttl)
			}
			continue
		}
		if h.lost && !h.fixed && !h.frozen && !h.crashed && quiet(s, h, paused) {
			judged := func(verdict string) { out.lossesJudged = append(out.lossesJudged, lossJudged{h.client, verdict}) }
			switch {
			case h.quorumMissed:
				judged("redlock")
				out.note("client %d %s %v lost as Redlock loses a lease, its renewals confirmed by no majority: %v; the last: %v", h.client, h.kind, h.tokens, h.loss, h.lastRenewal)
			case h.renewalFailed != "":
				judged("caught")
				out.violate("unexplained loss: client %d %s %v lost with no fault that reaches it, a renewal failing as no starvation makes one fail (%s; its process starved %v of its last %v): %v; %s", h.client, h.kind, h.tokens, h.renewalFailed, h.starved, h.ttl, h.loss, h.lossTold())
			case starvedEnough(h.starved, h.ttl) && h.starvable():
				judged("starved")
				out.starve("client %d %s %v lost, its process starved %v of its last %v: %v", h.client, h.kind, h.tokens, h.starved, h.ttl, h.loss)
			case !h.starvable():
				judged("caught")
				out.violate("unexplained loss: client %d %s %v lost with no fault that reaches it, told by Redis %v before its deadline (its process starved %v of its last %v, its goroutines waited to run %v): %v; %s", h.client, h.kind, h.tokens, h.deadline.Sub(h.lossSeen).Round(time.Millisecond), h.starved, h.ttl, h.goroutinesWaited, h.loss, h.lossTold())
			default:
				judged("caught")
				out.violate("unexplained loss: client %d %s %v lost with no fault that reaches it, its process starved %v of its last %v, its goroutines waited to run %v: %v; %s", h.client, h.kind, h.tokens, h.starved, h.ttl, h.goroutinesWaited, h.loss, h.lossTold())
			}
		}
		for name := range h.tokens {
			byName[name] = append(byName[name], h)
		}
	}
	for _, h := range holds {
		for _, w := range h.stale {
			if !w.accepted {
				continue
			}
			for _, other := range byName[w.name] {
				out.checks++
				// The other's token was minted after h ended if its call
				// returned after, unless the two may have held at once
				// (two shared holds, or an overlap the run's faults
				// document, as the token order's check says): then only
				// if it asked after. One granted first may return later,
				// with the lower token, and a store rightly takes h's.
				laterFrom := other.start
				if !h.exclusive() && !other.exclusive() || s.overlapDocumented(h.kind, other.kind) {
					laterFrom = other.asked
				}
				if other.client != w.client && laterFrom.After(h.end) && !other.fenced.IsZero() && other.fenced.Before(w.at) {
					out.violate("stale accepted: client %d's write with token %d to %s, after it lost the lock and client %d (token %d) took it",
						w.client, w.token, w.name, other.client, other.tokens[w.name])
					break
				}
			}
		}
	}
	for name, hs := range byName {
		slices.SortFunc(hs, func(a, b hold) int { return a.start.Compare(b.start) })
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				if a.empty() || b.empty() {
					continue
				}
				out.checks++
				if b.start.Before(a.end) && (a.exclusive() || b.exclusive()) {
					if s.overlapDocumented(a.kind, b.kind) {
						out.overlaps++
					} else {
						out.violate("overlap: %s held by client %d (%s, token %d) and client %d (%s, token %d) at once",
							name, a.client, a.kind, a.tokens[name], b.client, b.kind, b.tokens[name])
					}
				}
				after := a.end.Before(b.start)
				if !a.exclusive() && !b.exclusive() || s.overlapDocumented(a.kind, b.kind) {
					// b asked after a ended, so its token was minted after a's.
					// Two shared holds may overlap; and where a run loses keys
					// as documented (eviction, FLUSHALL, a restart), a waiter
					// handed the lock before a's grant may hear of it only
					// after a ended, its hold lost meanwhile: a documented
					// failure, which the fenced store's checks judge.
					after = a.end.Before(b.asked)
				}
				if after && b.tokens[name] <= a.tokens[name] {
					out.violate("token order: %s token %d (client %d, %s) after token %d (client %d, %s) had ended",
						name, b.tokens[name], b.client, b.kind, a.tokens[name], a.client, a.kind)
				}
			}
		}
		checkPermits(name, hs, out)
	}
}

// quiet reports whether no fault of the run could make h lost: none at
// all but Extend, SCRIPT FLUSH and a slow observer, or, on a cluster, pauses or graceful
// failovers of nodes that hold none of h's locks (paused names the locks
// on paused or failed-over nodes). A lease
// lost in a quiet run is a bug: a renewal that should have got through.
func quiet(s *schedule, h hold, paused map[string]bool) bool {
	for _, f := range s.Faults {
		switch {
		case f == "extend", f == "scriptflush", f == "crash", f == "child": // a crash costs only the dead process's holds
		case f == "slowobserver": // a slow Observer costs no lease its renewal
		case f == "rlfailover": // a failover of a Redlock master costs only a Redlock lease
			if h.kind == "redlock" {
				return false
			}
		case f == "pause" && s.Cluster, f == "cfailover": // a graceful failover stops its shard's writes a while
			for name := range h.tokens {
				if paused[name] {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}

// pausedNames are the locks that live on a node the run pauses or fails
// over.
func pausedNames(ctx context.Context, env *exploreEnv, s *schedule) map[string]bool {
	paused := env.cfail.failedOverNames()
	if !env.cluster {
		return paused
	}
	nodes := map[int]bool{}
	for _, f := range s.server {
		if f.Kind == "pause" {
			nodes[f.Node%len(env.nodes)] = true
		}
	}
	for kind, names := range s.names {
		if kind == "redlock" { // one master of three paused costs a Redlock nothing, unless it holds on two (quorumMissed)
			continue
		}
		for _, name := range names {
			slot, err := env.nodes[0].Client().ClusterKeySlot(ctx, "{"+name+"}").Result()
			if err != nil || nodes[nodeOfSlot(int(slot))] {
				paused[name] = true // unknown counts as paused: no false alarm
			}
		}
	}
	return paused
}

// nodeOfSlot is the master serving slot: redistest.StartCluster gives the
// three masters a third of the slots each, in order.
func nodeOfSlot(slot int) int {
	switch {
	case slot <= 5460:
		return 0
	case slot <= 10922:
		return 1
	}
	return 2
}

// checkPermits: never more semaphore holders at once than permits.
func checkPermits(name string, hs []hold, out *outcome) {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, h := range hs {
		if h.kind == "semaphore" {
			edges = append(edges, edge{h.start, 1}, edge{h.end, -1})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an exit before an entry at the same instant
	})
	inside := 0
	for _, e := range edges {
		inside += e.delta
		if inside > semaphorePermits && !out.params.overlapDocumented("semaphore", "semaphore") {
			out.violate("permits: %s had %d holders of %d permits", name, inside, semaphorePermits)
			return
		}
	}
}

// checkSettled looks at Redis once the run is over and its faults ended:
// no lock held by nobody (unless a fault hit its clean-up, which leaves a
// hold for its TTL at most, as documented), every lock free to take, and
// no key left behind once every TTL and registration has run out.
func checkSettled(ctx context.Context, env *exploreEnv, s *schedule, doubtful, lateOwners map[string]bool, out *outcome) {
	rdb := env.newRedis()
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		out.violate("new: %v", err)
		return
	}
	defer c.Close()
	settled := &process{client: c}
	if env.redlock != nil {
		now := env.redlockNow() // node 0's master of the moment, in a rlfailover run
		masters := make([]redis.UniversalClient, len(now))
		for i, n := range now {
			masters[i] = newRedisAt(n.Addr())
			defer masters[i].Close()
		}
		settled.redlock = newExploredRedlock(masters, nil)
		// A master restarted late in the run votes again once the guard
		// has passed: only then can every lock be had.
		_ = upFor(ctx, now, redlockGuard) // if not, the liveness check says so
		checkRedlockSettled(ctx, masters, s, doubtful, lateOwners, out)
	}
	var names []string
	for _, kind := range s.Kinds {
		if kind == "redlock" {
			continue
		}
		for _, n := range s.names[kind] {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	for _, name := range names {
		out.checks++
		var info admin.LockInfo
		err := untilEvictionClears(ctx, s.has("evict"), func() (err error) {
			info, err = c.Describe(ctx, name)
			return err
		})
		if err != nil {
			out.violate("describe: %s: %v", name, err)
			continue
		}
		// FLUSHALL takes tombstones with it, and so may eviction: a late
		// copy may then take a lock for nobody, the labelled run's
		// documented failure (as the late copies' own orphan check has it).
		if info.Kind != "" && !doubtful[name] && !s.has("pause") && !s.has("flushall") && !s.has("restart") && !s.has("ctakeover") && !s.has("evict") {
			out.violate("orphan: %s is held (%s, %v left, holders %v) after every holder let go", name, info.Kind, info.TTL, info.Holders)
		}
	}
	// Liveness: once faults stop, every lock can be had within a TTL.
	for _, kind := range s.Kinds {
		for _, name := range s.names[kind] {
			out.checks++
			o := op{Kind: kind, Names: []string{name}, TTL: time.Second, Wait: 5 * time.Second}
			if kind == "multi" {
				o.Names = s.names[kind]
			}
			opts := []dlock.Option{dlock.WithTTL(time.Second), dlock.WithWait(5 * time.Second)}
			if kind == "redlock" {
				// The lock's state is judged, not the machine's speed: a
				// 1 s TTL's node timeout (10 ms) is missed by every master
				// for seconds on end when a soak fills both cores.
				opts = append(opts, dlock.WithNodeTimeout(250*time.Millisecond))
			}
			var l *dlock.Lease
			err := untilEvictionClears(ctx, s.has("evict"), func() (err error) {
				lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				l, err = acquire(lctx, settled, o, opts)
				return err
			})
			if err != nil {
				out.violate("liveness: %s %s cannot be taken after the faults: %v", kind, name, err)
				continue
			}
			_ = l.Unlock(ctx)
		}
	}
	// Keys: the locks' own keys gone once TTLs (3 s at most) and
	// registrations (0.9 s) have run out; what stays longer stays on
	// purpose, and only for as long as documented.
	out.checks++
	nodes := env.nodes
	if env.failover != nil { // the master of the moment: the replica's keys are its copies
		master, live := env.failover.current()
		nodes = live[:1]
		if master != nil {
			nodes = []*redistest.Server{master}
		}
	}
	left := waitKeysGone(ctx, time.Now, time.Now().Add(5*time.Second), func() []string {
		left := keysLeft(ctx, nodes, s.Seed, false)
		if env.redlock != nil {
			left = append(left, keysLeft(ctx, env.redlockNow(), s.Seed, true)...)
		}
		return left
	})
	if len(left) > 0 {
		out.violate("keys left: %v", left)
	}
}

// waitKeysGone reads the keys left (read) until none is, and returns those
// a read begun after deadline still found, or nil. A read is judged by when
// it began: one pass over many keys (a Redlock run leaves a tombstone on
// every master for each failed attempt) may take seconds on a loaded
// machine, and a key it read in time, with some TTL left, is no key left
// after the deadline (soak M, seed 1795762742435567400).
func waitKeysGone(ctx context.Context, now func() time.Time, deadline time.Time, read func() []string) []string {
	for {
		late := now().After(deadline)
		left := read()
		if len(left) == 0 {
			return nil
		}
		if late || ctx.Err() != nil {
			return left
		}
		_ = sleepCtx(ctx, 100*time.Millisecond)
	}
}

// keptFor is how long a key may outlive every hold, by its kind (the part
// of its name after the lock's): fencing counters FenceRetentionTTLs hold
// TTLs (longestTTL), tombstones a minute, release marks CleanupTimeout, a
// Semaphore's number of permits a TTL (it expires with the last permit);
// a Redlock master's fencing counter has no expiry, by design
// (redlock_fence.lua). Anything else must be gone.
func keptFor(key string, redlock bool) (bound time.Duration, forever bool) {
	switch {
	case strings.HasSuffix(key, ":fence") && redlock:
		return 0, true
	case strings.HasSuffix(key, ":fence"):
		return time.Duration(scripts.FenceRetentionTTLs) * longestTTL, false
	case strings.Contains(key, ":void:"):
		return time.Minute, false
	case strings.Contains(key, ":released:"):
		return dlock.CleanupTimeout, false
	case strings.HasSuffix(key, ":permits"):
		return longestTTL, false
	}
	return 0, false
}

// keysLeft lists the run's keys that should be gone: the locks' own, and
// any kept key without an expiry or with more than its bound left.
func keysLeft(ctx context.Context, nodes []*redistest.Server, seed uint64, redlock bool) []string {
	var left []string
	for _, n := range nodes {
		rdb := n.Client()
		keys, _ := rdb.Keys(ctx, fmt.Sprintf("*{x%d:*", seed)).Result()
		ttls := make([]*redis.DurationCmd, len(keys)) // one round trip for them all
		_, _ = rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i, k := range keys {
				ttls[i] = pipe.PTTL(ctx, k)
			}
			return nil
		})
		for i, k := range keys {
			bound, forever := keptFor(k, redlock)
			if forever {
				continue
			}
			ttl, err := ttls[i].Result()
			if bound == 0 {
				if err == nil && ttl == -2 { // gone since KEYS listed it (-2: no such key)
					continue
				}
				left = append(left, fmt.Sprintf("%s (expires in %v)", k, ttl))
				continue
			}
			if err == nil && (ttl == -1 || ttl > bound) { // -1: no expiry
				left = append(left, fmt.Sprintf("%s (expires in %v, bound %v)", k, ttl, bound))
			}
		}
	}
	slices.Sort(left)
	return left
}
