//go:build faults

package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
)

// The cluster failover faults: in some cluster runs the cluster has a
// replica per master (redistest.StartReplicatedCluster, one per lane,
// started when first needed), and once or twice, while clients hold and
// contend, the master of one of the run's locks hands its slots to its
// replica with CLUSTER FAILOVER (redistest.Cluster.ManualFailOver), as an
// operator upgrading a node does:
//
//	cfailover  graceful: the master stops taking writes, the replica
//	           catches up with it and is elected; nothing is lost, so every
//	           checker applies, and a lease may be lost only where its lock
//	           is on the shard that failed over (its writes stood still).
//	ctakeover  forced: the replica is cut off its master first
//	           (redistest.Cluster.CutReplica) for 0.2–1.5 s, while the master
//	           goes on applying grants, renewals and releases, then takes
//	           over with CLUSTER FAILOVER FORCE or TAKEOVER; what the master
//	           applied since the cut is lost with its data, which the new
//	           master's replaces. The explored clients do not ask
//	           WithReplicaAck (no cluster run does), so this is the
//	           documented failure (docs/SAFETY.md, "Failover with
//	           asynchronous replication"): labelled, and the checks ask that
//	           fencing still catches the overlaps and tokens still increase.
//
// Neither with a pause or a slot migration (their nodes are the cluster's
// masters, which a failover swaps); the old master always rejoins as the
// new one's replica, and the cluster settles before the run goes on.

// clusterFailoverStream is the key of the stream both are drawn from:
// under it no CI seed draws either (TestExplore_ClusterFailoversLeaveCISeedsAlone).
const clusterFailoverStream = 0xcf42

// drawClusterFailover draws whether a cluster run fails a master over,
// gracefully in half of them, forcibly in a third of those that are not
// quiet, from a stream of its own, so that every seed keeps the schedule
// it had without them.
func (p *params) drawClusterFailover(seed uint64, quiet bool) {
	rng := rand.New(rand.NewPCG(seed, clusterFailoverStream))
	graceful, forced := rng.IntN(2) == 0, rng.IntN(3) == 0
	if !p.Cluster || p.has("pause") || p.has("migrate") {
		return
	}
	if graceful {
		p.Faults = append(p.Faults, "cfailover")
	}
	if forced && !quiet {
		p.Faults = append(p.Faults, "ctakeover")
	}
}

// failsOverCluster reports whether the run fails a cluster master over.
func (p params) failsOverCluster() bool {
	return p.Cluster && (p.has("cfailover") || p.has("ctakeover"))
}

// clusterFailover is one master's slots handed to its replica.
type clusterFailover struct {
	At   time.Duration // after the run's start (the first), or after the previous one settled
	Name string        // a lock of the run: its master fails over
	Mode string        // "" (graceful), "FORCE" or "TAKEOVER"
	Cut  time.Duration // forced ones: how long the replica is cut off before
}

// drawClusterFailovers picks the run's failovers: one or two, the first
// within two seconds, each of the master of one of the run's locks (not
// a Redlock's: its masters are no cluster); graceful or forced as the
// run's kinds allow.
func drawClusterFailovers(p params, names map[string][]string) []clusterFailover {
	if !p.failsOverCluster() || p.has("pause") || p.has("migrate") { // a replay may ask for them together
		return nil
	}
	var candidates []string
	for _, k := range p.Kinds {
		if k != "redlock" {
			candidates = append(candidates, names[k]...)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	var modes []string
	if p.has("cfailover") {
		modes = append(modes, "")
	}
	if p.has("ctakeover") {
		modes = append(modes, "FORCE", "TAKEOVER")
	}
	rng := rand.New(rand.NewPCG(p.Seed, clusterFailoverStream+1))
	out := make([]clusterFailover, 1+rng.IntN(2))
	for i := range out {
		f := &out[i]
		f.At = time.Duration(200+rng.IntN(1800)) * time.Millisecond
		f.Name = candidates[rng.IntN(len(candidates))]
		f.Mode = modes[rng.IntN(len(modes))]
		if f.Mode != "" {
			f.Cut = time.Duration(200+rng.IntN(1300)) * time.Millisecond
		}
	}
	return out
}

// clusterFailovers is a run's replicated cluster, and what its failovers
// did.
type clusterFailovers struct {
	c *redistest.Cluster

	nodesMu sync.Mutex // c.Nodes and c.Replicas: a failover swaps them

	mu      sync.Mutex
	windows []outage  // one per failover made
	lost    time.Time // the last forced failover's promotion: what it lost is held until a claim after it
	made    map[string]int
	failed  error
	log     []string
}

// outage is a failover's span, with the shard's lock names: from its
// first step (the cut, or CLUSTER FAILOVER) to a while after the cluster
// settled (clients learn the new master from a MOVED).
type outage struct {
	from, to time.Time
	names    map[string]bool
	forced   bool // what its master applied meanwhile may be lost
}

// outageAfter is how long after a failover settled its shard's clients
// may still meet the old master and be redirected.
const outageAfter = 500 * time.Millisecond

func newClusterFailovers(c *redistest.Cluster) *clusterFailovers {
	return &clusterFailovers{c: c, made: map[string]int{}}
}

// nodes are the masters and the replicas now.
func (e *clusterFailovers) nodes() (masters, replicas []*redistest.Server) {
	e.nodesMu.Lock()
	defer e.nodesMu.Unlock()
	return slices.Clone(e.c.Nodes), slices.Clone(e.c.Replicas)
}

// mayHaveFailed reports whether a call between call and ret may have
// failed for a failover: it overlapped one, on any shard (a clean-up's
// keys are its lock's, but a ClusterClient reloads its layout for all).
// Nil e: never.
func (e *clusterFailovers) mayHaveFailed(call, ret time.Time) bool {
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.ContainsFunc(e.windows, func(w outage) bool {
		return !ret.Before(w.from) && (w.to.IsZero() || !call.After(w.to))
	})
}

// mayBeUndone reports whether a write applied between call and ret may
// have been lost with a forced failover: a release that returned done may
// have come back with the promotion. Nil e: never.
func (e *clusterFailovers) mayBeUndone(call, ret time.Time) bool {
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.ContainsFunc(e.windows, func(w outage) bool {
		return w.forced && !ret.Before(w.from) && (w.to.IsZero() || !call.After(w.to))
	})
}

// failOverCluster runs the schedule's failovers, one after another, on
// its own goroutine; report adds what they did to the run's outcome.
func (e *clusterFailovers) failOverCluster(ctx context.Context, s *schedule) {
	start, since := time.Now(), time.Now()
	for i, fo := range s.clusterFailovers {
		if sleepCtx(ctx, time.Until(since.Add(fo.At))) != nil {
			return
		}
		began := time.Now()
		if err := e.failOverOnce(ctx, s, fo); err != nil {
			e.mu.Lock()
			e.failed = err
			e.mu.Unlock()
			return
		}
		e.mu.Lock()
		w := e.windows[len(e.windows)-1]
		e.log = append(e.log, fmt.Sprintf("cluster failover %d at %v: %+v; settled %v later",
			i, began.Sub(start).Round(time.Millisecond), fo, w.to.Add(-outageAfter).Sub(began).Round(time.Millisecond)))
		e.mu.Unlock()
		since = time.Now()
	}
}

// failOverOnce fails over the master of fo.Name's slot: its replica cut
// off first for a forced one.
func (e *clusterFailovers) failOverOnce(ctx context.Context, s *schedule, fo clusterFailover) error {
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	masters, _ := e.nodes()
	node := redis.NewClient(&redis.Options{Addr: masters[0].Addr()}) // every node answers CLUSTER KEYSLOT
	defer node.Close()
	slot, err := node.ClusterKeySlot(fctx, "{"+fo.Name+"}").Result()
	if err != nil {
		return fmt.Errorf("cfailover: the slot of %s: %w", fo.Name, err)
	}
	e.nodesMu.Lock()
	shard, err := e.c.SlotOwner(fctx, int(slot))
	e.nodesMu.Unlock()
	if err != nil {
		return fmt.Errorf("cfailover: %w", err)
	}
	w := outage{from: time.Now(), names: map[string]bool{}, forced: fo.Mode != ""}
	for kind, names := range s.names {
		if kind == "redlock" {
			continue
		}
		for _, n := range names {
			if sl, err := node.ClusterKeySlot(fctx, "{"+n+"}").Result(); err != nil || nodeOfSlot(int(sl)) == nodeOfSlot(int(slot)) {
				w.names[n] = true // unknown counts as on the shard: no false alarm
			}
		}
	}
	e.mu.Lock()
	e.windows = append(e.windows, w)
	at := len(e.windows) - 1
	e.mu.Unlock()
	if fo.Mode != "" {
		e.nodesMu.Lock()
		err := e.c.CutReplica(fctx, shard)
		e.nodesMu.Unlock()
		if err != nil {
			return fmt.Errorf("ctakeover: %w", err)
		}
		_ = sleepCtx(fctx, fo.Cut)
	}
	// What the master applied that its replica lacks, in bytes of the
	// replication stream, as the failover begins: a forced one loses it
	// (and what the old master applies until it hears of the new one).
	behind := replicationLag(fctx, masters[shard], e.c.Replicas[shard])
	replica := e.c.Replicas[shard]
	e.nodesMu.Lock()
	err = e.c.ManualFailOver(fctx, shard, fo.Mode)
	e.nodesMu.Unlock()
	if err != nil && fo.Mode != "" {
		// Not promoted: its link back, so that the lane's next runs find
		// the cluster whole (or the violation says why not).
		r := redis.NewClient(&redis.Options{Addr: replica.Addr()})
		_ = r.ConfigSet(ctx, "masteruser", "").Err()
		_ = r.ConfigSet(ctx, "masterauth", "").Err()
		_ = r.Close()
	}
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if fo.Mode != "" && behind > 0 {
		e.made["ctakeover.behind"]++
		e.made["ctakeover.bytes"] += int(behind)
	}
	e.windows[at].to = now.Add(outageAfter)
	if err != nil {
		return fmt.Errorf("cfailover: %w", err)
	}
	if fo.Mode == "" {
		e.made["cfailover"]++
	} else {
		e.made["ctakeover"]++
		e.made["ctakeover."+fo.Mode]++
		e.lost = now
	}
	return nil
}

// report adds the failovers made to out, and counts the holds that
// spanned one on their shard. One the explorer could not make is a
// violation: the run's later checks are then moot.
func (e *clusterFailovers) report(env *exploreEnv, holds []hold, out *outcome) {
	if e == nil {
		return
	}
	env.nodes, env.replicas = e.nodes() // the settling checks count keys on the masters of now
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, n := range e.made {
		out.injected[k] += n
	}
	for _, l := range e.log {
		out.note("%s", l)
	}
	for _, w := range e.windows {
		for _, h := range holds {
			if h.start.Before(w.from) && h.end.After(w.to) && slices.ContainsFunc(keys(h.tokens), func(n string) bool { return w.names[n] }) {
				out.injected["cfailover.heldacross"]++
			}
		}
	}
	if e.failed != nil {
		out.violate("%v", e.failed)
	}
}

// replicationLag is how far replica is behind master, in bytes of the
// replication stream; 0 if either cannot say.
func replicationLag(ctx context.Context, master, replica *redistest.Server) int64 {
	m, r := redis.NewClient(&redis.Options{Addr: master.Addr()}), redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer m.Close()
	defer r.Close()
	at, err1 := infoField(ctx, m, "replication", "master_repl_offset")
	has, err2 := infoField(ctx, r, "replication", "master_repl_offset")
	if err1 != nil || err2 != nil {
		return 0
	}
	return max(0, at-has)
}

func keys(m map[string]uint64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// failedOverNames are the locks on a shard a run failed over.
func (e *clusterFailovers) failedOverNames() map[string]bool {
	names := map[string]bool{}
	if e == nil {
		return names
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, w := range e.windows {
		for n := range w.names {
			names[n] = true
		}
	}
	return names
}

// waitTakenOver returns once every hold a forced failover may have
// brought back (a release lost with the old master) or left behind (a
// tombstone lost, a late copy granted) has run out: its longest claim
// from the promotion, after which nothing of the old master's is served.
func waitTakenOver(ctx context.Context, env *exploreEnv, s *schedule) {
	if env.cfail == nil {
		return
	}
	env.cfail.mu.Lock()
	lost := env.cfail.lost
	env.cfail.mu.Unlock()
	if lost.IsZero() {
		return
	}
	waitClaimsOut(ctx, s, lost)
}

// TestExplore_ClusterFailoversLeaveCISeedsAlone: under
// clusterFailoverStream no CI seed draws a cluster failover (their
// schedules are as they were; a CI case runs them, its params given), and
// the draw keeps to what it promises: cluster runs only, neither with a
// pause nor a migration, a forced one never in a quiet run, each at about
// its rate.
func TestExplore_ClusterFailoversLeaveCISeedsAlone(t *testing.T) {
	for _, seed := range ciSeeds {
		if p := randomParams(seed, maxClients()); p.failsOverCluster() {
			t.Errorf("seed %d draws a cluster failover: %s", seed, p)
		}
	}
	eligible, graceful, forced := 0, 0, 0
	for seed := uint64(1000); seed < 21000; seed++ {
		p := randomParams(seed, 16)
		if (p.has("cfailover") || p.has("ctakeover")) && (!p.Cluster || p.has("pause") || p.has("migrate")) {
			t.Errorf("seed %d: a cluster failover off a cluster, or with a pause or a migration: %s", seed, p)
		}
		if p.Cluster && !p.has("pause") && !p.has("migrate") {
			eligible++
			if p.has("cfailover") {
				graceful++
			}
			if p.has("ctakeover") {
				forced++
			}
		}
	}
	if rate := float64(graceful) / float64(eligible); rate < 0.4 || rate > 0.6 {
		t.Errorf("%d graceful failovers in %d cluster runs that may have one: %.3f, want about 1/2", graceful, eligible, rate)
	}
	if forced == 0 || forced > eligible/3 {
		t.Errorf("%d forced failovers in %d cluster runs that may have one, want some, under a third", forced, eligible)
	}
	t.Logf("of %d eligible cluster runs: %d graceful, %d forced", eligible, graceful, forced)
}
