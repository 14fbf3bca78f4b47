//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// The failover fault: on a standalone run, the server is a Sentinel's
// master with one replica (redistest.StartFailover), every process's
// go-redis client follows the Sentinel (redis.NewFailoverClient) and its
// dlock Client asks each acquisition to reach the replica
// (dlock.WithReplicaAck). Once or twice in the run's first seconds, while
// clients hold and contend, the master is killed (SIGKILL) and the
// Sentinel promotes the replica: told at once (SENTINEL FAILOVER), or left
// to see the master down by itself (down-after, 1 s). Before half the
// kills the replica is cut off (redistest.Failover.CutReplica: its link
// closed, the master refusing it back) for 0.2–2.5 s, so that what the
// master applies meanwhile is lost with it, as with a replica whose
// network failed; the Sentinel still promotes it (its link down for less
// than ten down-afters). The old master then either stays dead for the rest of the run (no
// replica: every acquisition fails its WAIT and gives its grant back) or
// comes back empty as the new master's replica, which a second failover
// needs.
//
// Not labelled: WithReplicaAck promises that every hold the library
// returned was on the replica, so no overlap, no token going back, and no
// hold gone before its lease's deadline. What a failover may cost is a
// lease (renewals fail until the promotion), a release (one the master
// applied and did not pass on comes back with the promotion, held until
// its TTL) and a clean-up (a tombstone, or an abandon that met no master).

// failoverStream is the key of the stream failovers are drawn from: under
// it, no CI seed draws one (TestExplore_NewFaultsLeaveCISeedsAlone).
const failoverStream = 0xfa26

// failoverRate: a failover comes in one standalone run in failoverRate.
const failoverRate = 5

// replicaAckTimeout is how long an explored acquisition's WAIT waits for
// the replica (dlock.WithReplicaAck).
const replicaAckTimeout = 200 * time.Millisecond

// replicated is how long after the master applied a write its replica
// may still be without it, when its link is up: the master writes to the
// replica's socket in the event-loop turn it replies in, and a socket's
// data survives its sender's death; this is ample.
const replicated = 50 * time.Millisecond

// drawFailover draws whether a standalone run fails its server over, from
// a stream of its own, so every seed keeps the schedule it had without it.
// Not with a restart, an eviction or network faults: their node is the
// run's one server, which a failover replaces.
func (p *params) drawFailover(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, failoverStream))
	if rng.IntN(failoverRate) == 0 && !p.Cluster && !p.has("restart") && !p.has("evict") && !p.has("network") {
		p.Faults = append(p.Faults, "failover")
	}
}

// sentinelPauseBound is the longest pause of a failover run's master:
// half the Sentinel's down-after (1 s).
const sentinelPauseBound = 500 * time.Millisecond

// failover is one master killed and its replica promoted.
type failover struct {
	At     time.Duration // after the run's start (the first), or after the previous rejoined
	Lag    time.Duration // how long the replica is behind before the kill; 0: it is not
	Force  time.Duration // how long after the kill SENTINEL FAILOVER is sent, unless the Sentinel began by itself
	Rejoin bool          // the old master comes back empty as the new one's replica
}

// drawFailovers picks the run's failovers: one or two, the first within
// the first two seconds; half with the replica cut off for 0.2–2.5 s
// first, long enough for renewals to be lost, and for a hold's expiry on
// the replica to pass before the promotion; most promoted at once, some
// left to the Sentinel's own detection.
func drawFailovers(p params) []failover {
	if !p.has("failover") && !p.has("rlfailover") || p.has("failover") && p.Cluster { // a replay may ask for it on a cluster: nothing to fail over
		return nil
	}
	rng := rand.New(rand.NewPCG(p.Seed, failoverStream+1))
	n := 1 + rng.IntN(2)
	out := make([]failover, n)
	for i := range out {
		f := &out[i]
		f.At = time.Duration(200+rng.IntN(1800)) * time.Millisecond
		if rng.IntN(2) == 0 {
			f.Lag = time.Duration(200+rng.IntN(2300)) * time.Millisecond
		}
		if rng.IntN(3) == 0 {
			f.Force = 1500 * time.Millisecond // the Sentinel begins after 1 s of down-after, mostly
		}
		f.Rejoin = i < n-1 || rng.IntN(2) == 0 // a second failover needs a replica
	}
	return out
}

// failoverEnv is a failover run's servers, and what its failovers did.
type failoverEnv struct {
	f *redistest.Failover

	mu      sync.Mutex
	master  *redistest.Server   // the current master: nil between the kill and the promotion
	live    []*redistest.Server // the data nodes running
	windows []lossWindow        // one per failover
	last    lossWindow          // the last failover's window, once it is made
	planned map[string]int      // switches to each address the explorer's failovers made, not yet seen by watchSentinel
	flipped bool                // the Sentinel failed over on its own (watchSentinel)
	killed  time.Time           // the last kill
	made    map[string]int      // the failovers made, and those with the replica behind
	failed  error               // the failover the explorer could not make
	log     []string            // what each took, for the run's notes
	// isolated: set while its replica is cut off; a rlfailover run's
	// Redlock master 2 drops every script call meanwhile
	// (explore_rlfailover_test.go)
	isolated atomic.Bool
}

// lossWindow is when a write a master applied may have been lost with it:
// from its replica's falling behind (or shortly before the kill) to the
// kill (zero while the master lives); and back, when the replica was
// promoted (zero until then): from the kill to then, no master answers.
// lossWindow is a failover's: writes its old master applied from from to
// to (its kill) may be lost, and calls from to until back (the promotion)
// may meet no master. A failover the Sentinel made on its own is seen only
// at its switch: lostUntil, when set, ends the writes it may have lost (the
// old master took them until its clients heard of the switch), past to.
type lossWindow struct{ from, to, back, lostUntil time.Time }

// failoverACL is the explored clients' ACL user on a failover run's nodes:
// a standalone server's (startServer), and WAIT.
var failoverACL = append(append([]string(nil), redistest.RedlockACL...), "+wait")

func startFailoverEnv(t redistest.T) *failoverEnv {
	f := redistest.StartFailover(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, n := range []*redistest.Server{f.Master, f.Replica} {
		args := []any{"ACL", "SETUSER", aclUser, "reset", "on", ">" + aclPassword}
		for _, r := range failoverACL {
			args = append(args, r)
		}
		if err := n.Client().Do(ctx, args...).Err(); err != nil {
			t.Fatalf("creating the ACL user: %v", err)
		}
	}
	return &failoverEnv{f: f, master: f.Master, live: []*redistest.Server{f.Master, f.Replica}, made: map[string]int{}, planned: map[string]int{}}
}

// newRedis is an explored client of a failover run: it follows the
// Sentinel's master, with the explorer's timeouts and ACL user.
func (e *failoverEnv) newRedis() *redis.Client {
	return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.MasterName,
		SentinelAddrs: []string{e.f.Sentinel.Addr()}, Username: aclUser, Password: aclPassword,
		DialTimeout: time.Second, ReadTimeout: readTimeout, WriteTimeout: time.Second,
		MaxRetries: -1, ContextTimeoutEnabled: true})
}

// options are what an explored Client of a failover run adds: every
// acquisition waits for the replica.
func (e *failoverEnv) options() []dlock.Option {
	if e == nil {
		return nil
	}
	return []dlock.Option{dlock.WithReplicaAck(1, replicaAckTimeout)}
}

// current is the master now, nil during a failover, and the nodes running.
func (e *failoverEnv) current() (*redistest.Server, []*redistest.Server) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.master, append([]*redistest.Server(nil), e.live...)
}

// mayBeUndone reports whether a write applied between call and ret may
// have been lost with a master killed before its replica had it: a
// release that returned done may have come back with the promotion. Nil
// e: never.
func (e *failoverEnv) mayBeUndone(call, ret time.Time) bool {
	return e.anyWindow(func(w lossWindow) bool {
		end := w.to
		if !w.lostUntil.IsZero() {
			end = w.lostUntil
		}
		return !ret.Before(w.from) && (end.IsZero() || !call.After(end))
	})
}

// mayHaveFailed reports whether a call between call and ret may have
// met no master: it overlapped a failover, from the kill to the
// promotion. Nil e: never.
func (e *failoverEnv) mayHaveFailed(call, ret time.Time) bool {
	return e.anyWindow(func(w lossWindow) bool {
		return !w.to.IsZero() && !ret.Before(w.to) && (w.back.IsZero() || !call.After(w.back))
	})
}

// anyWindow reports whether any failover's window so far is one that
// overlaps says overlaps; false for a nil e (a run without failovers).
func (e *failoverEnv) anyWindow(overlaps func(w lossWindow) bool) bool {
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.ContainsFunc(e.windows, overlaps)
}

// lastKill is when the run last killed a master; zero if it did not.
func (e *failoverEnv) lastKill() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.killed
}

func (e *failoverEnv) kill() {
	f := e.f
	for _, n := range []*redistest.Server{f.Master, f.Replica, f.Sentinel} {
		n.Close()
	}
}

// failOver runs the schedule's failovers, one after another, on its own
// goroutine; report adds what it did to the run's outcome.
func (e *failoverEnv) failOver(ctx context.Context, s *schedule) {
	start, since := time.Now(), time.Now()
	for i, fo := range s.failovers {
		if sleepCtx(ctx, time.Until(since.Add(fo.At))) != nil {
			return
		}
		e.mu.Lock()
		flipped := e.flipped
		e.mu.Unlock()
		if flipped {
			return
		}
		began := time.Now()
		if err := e.failOverOnce(ctx, fo); err != nil {
			e.mu.Lock()
			if e.flipped {
				// The Sentinel failed over on its own meanwhile (a master it
				// took for down on a loaded machine), and then found no
				// replica to promote for ours: the explorer's failure to make
				// the fault, not dlock's; the run's checks still judge it.
				e.made["failover.unmade"]++
				e.log = append(e.log, fmt.Sprintf("failover: not made after the Sentinel's own: %v", err))
			} else {
				e.failed = err
			}
			e.mu.Unlock()
			return
		}
		e.mu.Lock()
		e.made["failover"]++
		if fo.Lag > 0 {
			e.made["failover.lag"]++
		}
		w := e.last
		e.log = append(e.log, fmt.Sprintf("failover %d at %v: %+v; killed after %v, promoted %v later, done %v later",
			i, began.Sub(start).Round(time.Millisecond), fo, w.to.Sub(began).Round(time.Millisecond),
			w.back.Sub(w.to).Round(time.Millisecond), time.Since(w.back).Round(time.Millisecond)))
		e.mu.Unlock()
		since = time.Now()
	}
}

// report adds the failovers made to out. One the explorer could not make
// is a violation: the run's later checks are then moot, and it says so
// first.
func (e *failoverEnv) report(out *outcome) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, n := range e.made {
		out.injected[k] += n
	}
	for _, l := range e.log {
		out.note("%s", l)
	}
	// A failover the Sentinel made on its own (a master it saw down)
	// is one the checks did not follow: say so, for whoever reads a
	// failure of the run.
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: e.f.Sentinel.Addr()})
	defer sentinel.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if addr, err := sentinel.GetMasterAddrByName(ctx, redistest.MasterName).Result(); err == nil && len(addr) == 2 &&
		e.master != nil && addr[0]+":"+addr[1] != e.master.Addr() {
		out.note("failover: the Sentinel names %s:%s master, not %s: it failed over on its own", addr[0], addr[1], e.master.Addr())
	}
	failedFailover(out, e.failed)
}

// failedFailover judges a failover the explorer could not make. A Sentinel
// that finds no replica good to promote (NOGOODSLAVE) for the 30 s the
// explorer asks, as a soak's load makes it now and then (its look at the
// replica goes stale), or does not answer SENTINEL FAILOVER in that time,
// made no fault: the run's checks go on, and the report counts it apart,
// the harness's and not dlock's. Any other failure is a violation.
func failedFailover(out *outcome, err error) {
	switch {
	case err == nil:
	case strings.Contains(err.Error(), "NOGOODSLAVE"),
		strings.Contains(err.Error(), "SENTINEL FAILOVER") && errors.Is(err, context.DeadlineExceeded):
		out.unmade++
		out.note("failover not made, the harness's: %v", err)
	default:
		out.violate("failover: %v", err)
	}
}

// failOverOnce kills the master, the replica behind it first if fo says so,
// has the Sentinel promote the replica, and brings the old master back
// as its replica if fo says so.
func (e *failoverEnv) failOverOnce(ctx context.Context, fo failover) error {
	f := e.f
	old, replica := f.Master, f.Replica
	var w int // the failover's loss window
	if fo.Lag > 0 {
		// What the master sent before is the replica's; what it applies
		// from now on, the replica never gets.
		w = e.open(time.Now())
		if err := f.CutReplica(ctx); err != nil {
			return fmt.Errorf("cutting the replica off: %w", err)
		}
		e.isolated.Store(true)
		_ = sleepCtx(ctx, fo.Lag)
	} else {
		w = e.open(time.Now().Add(-replicated))
	}
	e.mu.Lock()
	e.master = nil
	e.planned[replica.Addr()]++ // the +switch-master watchSentinel is to see
	e.mu.Unlock()
	old.Kill()
	e.isolated.Store(false)
	e.mu.Lock()
	e.killed = time.Now()
	e.windows[w].to = e.killed
	e.live = []*redistest.Server{replica}
	e.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	promote := f.Promote
	if fo.Force > 0 {
		wait, cancelWait := context.WithTimeout(pctx, fo.Force)
		if f.AwaitPromotion(wait) == nil { // the Sentinel saw the master down by itself
			promote = f.AwaitPromotion
		}
		cancelWait()
	}
	if err := promote(pctx); err != nil {
		return fmt.Errorf("promoting the replica: %w", err)
	}
	e.mu.Lock()
	e.master = replica
	e.windows[w].back = time.Now()
	e.last = e.windows[w]
	e.mu.Unlock()
	if !fo.Rejoin {
		return nil
	}
	if err := f.Rejoin(pctx, redistest.UserArgs(aclUser, aclPassword, failoverACL)...); err != nil {
		return fmt.Errorf("rejoining the old master: %w", err)
	}
	e.mu.Lock()
	e.live = []*redistest.Server{replica, old}
	e.mu.Unlock()
	return nil
}

// open opens a loss window from from, and returns its index.
func (e *failoverEnv) open(from time.Time) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.windows = append(e.windows, lossWindow{from: from})
	return len(e.windows) - 1
}

// unplannedSpan is how far around a failover the Sentinel made on its own
// (seen at its +switch-master) writes may have been lost: its master
// seen down, a replica chosen and promoted (a second or two), and the old
// master, alive, taking writes until its clients hear of the switch.
const unplannedBefore, unplannedAfter = 3 * time.Second, 500 * time.Millisecond

// unplanned notes a failover the Sentinel made on its own, seen switching
// at at: writes from unplannedBefore before it to unplannedAfter after it
// may be lost, and calls in that span may meet no master. Under e.mu.
func (e *failoverEnv) unplanned(at time.Time) {
	e.flipped = true
	e.windows = append(e.windows, lossWindow{from: at.Add(-unplannedBefore), to: at.Add(-unplannedBefore),
		back: at.Add(unplannedAfter), lostUntil: at.Add(unplannedAfter)})
	e.killed = at.Add(unplannedAfter)
}

// watchSentinel follows the Sentinel's +switch-master until ctx ends. The
// Sentinel may fail over on its own: seen after a rejoin, a master it had
// just promoted marked down a second later and a failover back to the
// old one. Such a failover loses what its old master applied as the
// explorer's do, so it gets a loss window of its own, the run's master
// follows it, and the run makes no more failovers (its servers are no
// longer where the schedule expects them).
func (e *failoverEnv) watchSentinel(ctx context.Context) {
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: e.f.Sentinel.Addr()})
	defer sentinel.Close()
	sub := sentinel.Subscribe(ctx, "+switch-master")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // subscribed: no switch goes unseen from here
		return
	}
	stop := context.AfterFunc(ctx, func() { _ = sub.Close() }) // a receive does not end with ctx
	defer stop()
	for {
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil {
			return
		}
		f := strings.Fields(msg.Payload) // name, old ip, old port, new ip, new port
		if len(f) != 5 {
			continue
		}
		to, at := f[3]+":"+f[4], time.Now()
		e.mu.Lock()
		if e.planned[to] > 0 {
			e.planned[to]--
		} else {
			e.unplanned(at)
			e.master = nil
			for _, n := range []*redistest.Server{e.f.Master, e.f.Replica} {
				if n.Addr() == to {
					e.master = n
				}
			}
			e.made["failover.sentinel"]++
			e.log = append(e.log, fmt.Sprintf("the Sentinel failed over to %s on its own", to))
		}
		e.mu.Unlock()
	}
}

// waitFailedOut returns once every hold a failover may have brought back
// (a release lost with the master) has run out: its TTL from the kill at
// the latest, as the last write of it the replica had came before.
func waitFailedOut(ctx context.Context, env *exploreEnv, s *schedule) {
	if env.failover == nil {
		return
	}
	waitKillsOut(ctx, env.failover.lastKill, func(killed time.Time) { waitClaimsOut(ctx, s, killed) })
}

// waitKillsOut waits out (waitFrom) the last kill, and again while a later
// one was seen meanwhile: a failover the Sentinel makes on its own, heard
// at its +switch-master while the wait runs, moves the last kill, and may
// have lost a release as the explorer's do (soak M, seed
// 1795762742435570184: a hold taken and released after the planned
// failover, brought back by the Sentinel's failover back to the old
// master, which the orphan check, having waited from the planned kill
// only, found held).
func waitKillsOut(ctx context.Context, lastKill func() time.Time, waitFrom func(killed time.Time)) {
	var waited time.Time
	for ctx.Err() == nil {
		killed := lastKill()
		if !killed.After(waited) {
			return
		}
		waitFrom(killed)
		waited = killed
	}
}

// sentinelQuiet is go-redis's logger without what every client logs in
// every failover (the new master; dials refused while the master is
// dead), thousands of lines in a soak: the explorer judges outcomes.
type sentinelQuiet struct{}

func (sentinelQuiet) Printf(ctx context.Context, format string, v ...any) {
	if !strings.HasPrefix(format, "sentinel:") && !strings.HasPrefix(format, "redis: connection pool: failed to dial") {
		log.Printf(format, v...)
	}
}

func init() { redis.SetLogger(sentinelQuiet{}) }
