//go:build faults

package faults

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// The rlfailover fault: a failover behind a Redlock node (issue 33, item
// 1). The run's Redlock master 0 is a Sentinel's master with one replica
// (startFailoverEnv), reached by every process through a failover client
// (redis.NewFailoverClient), as the godoc allows ("a Client, or a failover
// client"); once or twice the master is killed, its replica cut off first
// at times, and the Sentinel promotes the replica (as the failover fault
// does to a standalone run's server: drawFailovers, failOverOnce). What the
// old master applied meanwhile is lost: holds, releases, tombstones. While
// the replica is cut off, master 2 drops every script call, as in issue
// 33's case: a Redlock granted then holds on masters 0 and 1 alone, and
// its hold on 0 dies with the master. Such runs draw TTLs and holds as a
// failover run does (1.5–3 s and 1.5–4 s, often): leases that last past
// the promotion.
//
// Not labelled: the restart guard counts another master behind the
// address as a restart, counted from when it is seen, so node 0 votes for
// nobody while a hold it lost may be valid; no overlap, token going back,
// nor Redlock held on a majority by nobody is allowed. A Redlock lease may
// be lost (only a Redlock's: the run stays quiet for the rest), an Unlock fail (node 0 unreachable until the promotion), a hold
// left on node 0 alone (a release lost with the master, brought back by
// the promotion) until its TTL; the settled checks read node 0's master of
// the moment, once the longest claim has run from the last kill.

// redlockFailoverStream is the key of the stream rlfailover is drawn from:
// under it, no CI seed draws it (TestExplore_RedlockFailoverLeavesCISeedsAlone).
const redlockFailoverStream = 0x7f10

// redlockFailoverRate: rlfailover comes in one run in it of those that
// may have it.
const redlockFailoverRate = 4

// drawRedlockFailover draws rlfailover, in a run with Redlocks and none of
// the faults that act on a Redlock master's process or link (pause,
// restart, flushall, scriptflush, network, a suspension, the child) or
// that fail over another node (failover, cfailover, ctakeover), from a
// stream of its own, so every seed keeps the schedule it had without it.
func (p *params) drawRedlockFailover(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, redlockFailoverStream))
	if rng.IntN(redlockFailoverRate) != 0 || !slices.Contains(p.Kinds, "redlock") {
		return
	}
	for _, f := range []string{"pause", "restart", "flushall", "scriptflush", "network", "suspend", "child", "failover", "cfailover", "ctakeover"} {
		if p.has(f) {
			return
		}
	}
	p.Faults = append(p.Faults, "rlfailover")
}

// startRedlockFailover starts node 0 of a rlfailover run's Redlock, and
// returns once its master is old enough to vote.
func startRedlockFailover(t *testing.T) *failoverEnv {
	e := startFailoverEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), redlockGuard+10*time.Second)
	defer cancel()
	waitUptime(t, ctx, []*redistest.Server{e.f.Master}, redlockGuard)
	return e
}

// redlockNow is the run's Redlock masters as they are now: node 0 of a
// rlfailover run is its failover's master of the moment (the live node
// while none is).
func (e *exploreEnv) redlockNow() []*redistest.Server {
	if e.rlFailover == nil {
		return e.redlock
	}
	master, live := e.rlFailover.current()
	if master == nil {
		master = live[0]
	}
	return append([]*redistest.Server{master}, e.redlock[1:]...)
}

// waitRedlockFailedOut is waitFailedOut for node 0 of a rlfailover run.
func waitRedlockFailedOut(ctx context.Context, env *exploreEnv, s *schedule) {
	if env.rlFailover == nil {
		return
	}
	waitKillsOut(ctx, env.rlFailover.lastKill, func(killed time.Time) { waitClaimsOut(ctx, s, killed) })
}

// TestExplore_RedlockFailoverLeavesCISeedsAlone: under
// redlockFailoverStream no CI seed draws rlfailover (a CI case runs it:
// its params are given), and the draw keeps to what it promises: only
// with Redlocks and none of the faults it excludes, in about one such run
// in redlockFailoverRate.
func TestExplore_RedlockFailoverLeavesCISeedsAlone(t *testing.T) {
	for _, seed := range ciSeeds {
		if p := randomParams(seed, maxClients()); p.has("rlfailover") {
			t.Errorf("CI seed %d draws rlfailover: %s", seed, p)
		}
	}
	may, drawn := 0, 0
	for seed := uint64(1000); seed < 9000; seed++ {
		p := randomParams(seed, 16)
		excluded := !slices.Contains(p.Kinds, "redlock") || slices.ContainsFunc(p.Faults, func(f string) bool {
			return slices.Contains([]string{"pause", "restart", "flushall", "scriptflush", "network", "suspend", "child", "failover", "cfailover", "ctakeover"}, f)
		})
		if excluded {
			if p.has("rlfailover") {
				t.Errorf("seed %d: rlfailover where it is excluded: %s", seed, p)
			}
			continue
		}
		may++
		if p.has("rlfailover") {
			drawn++
			if s := makeSchedule(p); len(s.failovers) == 0 {
				t.Errorf("seed %d: rlfailover with no failover scheduled: %s", seed, p)
			}
		}
	}
	if rate := float64(drawn) / float64(may); rate < 0.7/redlockFailoverRate || rate > 1.3/redlockFailoverRate {
		t.Errorf("rlfailover in %d of %d runs that may have it: %.3f, want about 1/%d", drawn, may, rate, redlockFailoverRate)
	}
}
