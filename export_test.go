package dlock

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/clock"
	"github.com/dlockio/dlock/internal/scripts"
)

// Internals the external tests look at.

// RenewerRunning reports whether c's renewal goroutine is alive.
func RenewerRunning(c *Client) bool {
	c.renewer.mu.Lock()
	defer c.renewer.mu.Unlock()
	return c.renewer.running
}

// RenewerLoops are the goroutines started for c's renewal loop that are
// alive now, by their ids, read from every goroutine's stack, so that the
// renewer keeps no count for tests. One not yet run shows no receiver: a
// test that calls this runs alone (not parallel), so it is c's.
func RenewerLoops(c *Client) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	ours := fmt.Sprintf("dlock.(*renewer).loop(%p", c.renewer)
	var ids []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		started := strings.Contains(g, "dlock.(*renewer).loop(")
		if strings.Contains(g, "created by github.com/dlockio/dlock.(*renewer).schedule") && (!started || strings.Contains(g, ours)) {
			id, _, _ := strings.Cut(strings.TrimPrefix(g, "goroutine "), " ")
			ids = append(ids, id)
		}
	}
	return ids
}

// RenewerScheduled reports how many leases c renews.
func RenewerScheduled(c *Client) int {
	c.renewer.mu.Lock()
	defer c.renewer.mu.Unlock()
	return len(c.renewer.due)
}

// SubscriberGoroutines reports how many subscriber goroutines c runs.
func SubscriberGoroutines(c *Client) int {
	c.mu.Lock()
	hub := c.hub
	c.mu.Unlock()
	if hub == nil {
		return 0
	}
	return hub.Goroutines()
}

// KeysOf returns the Redis names of a lock.
func KeysOf(prefix, name string) (lock, fence, channel string) {
	k := keysFor(prefix, name)
	return k.lock, k.fence, k.channel
}

// ClusterSlot is the hash slot dlock computes for a lock name's keys.
var ClusterSlot = clusterSlot

// ErrNotHeldThere is a Redlock node's answer to an unlock where the hold
// is not (or no longer) there.
var ErrNotHeldThere = errNotHeldThere

// HandOverTaken reports whether a Lock call of m whose latest attempt, its
// latest-th, registered it takes the hand-over grant (see mutexCall.granted).
// The lease it would make is ended at once: nothing was granted in Redis.
func HandOverTaken(m *Mutex, latest int, grant string) bool {
	a := m.call(context.Background())
	mc := a.v.(*mutexCall)
	mc.attempts, mc.registered, a.sent = latest, "registered", time.Now()
	return handOverTaken(a, grant)
}

// handOverTaken reports whether a takes the hand-over grant, ending the
// lease it would make at once.
func handOverTaken(a *call, grant string) bool {
	h, ok := parseHandOver(grant)
	if !ok {
		return false
	}
	l := a.grant.granted(h)
	if l == nil {
		return false
	}
	l.end(nil)
	return true
}

// FairHandOverTaken reports whether a Lock call of f whose latest attempt
// queued and read the fencing counter at fenced takes the hand-over grant.
func FairHandOverTaken(f *FairMutex, fenced int64, grant string) bool {
	a := f.call(context.Background())
	a.v.(*fairCall).fenced, a.sent = fenced, time.Now()
	return handOverTaken(a, grant)
}

// UseClock makes the leases of target, a *Client or *Redlock, read a
// clock of their own, which a test can suspend, resume, or move the wall
// side of (clock.Jump: as a machine resumed after a suspension finds it),
// and returns it. Call it before target's first use: it reads its clock
// unguarded.
func UseClock(target any) *clock.Clock {
	k := clock.New()
	clock.Use(target, k)
	return k
}

// TombstoneLife is how long a call that gave up keeps late copies of its
// attempts out.
const TombstoneLife = scripts.TombstoneLife

// AttemptReport is what one acquire attempt of a Client tells OnAttempt.
type AttemptReport struct {
	Script *redis.Script // the acquire script the attempt ran
	Reply  []int64       // its reply, nil after an error
	Entry  string        // the registration it sent: "" when none
	Err    error
}

// OnAttempt has tell called with every acquire attempt of c, once its
// reply is read and before the attempt acts on it (so before it returns a
// lease, waits or abandons), after any tell given before. Call it before
// c's first use: the Client reads its hooks unguarded.
func OnAttempt(c *Client, tell func(AttemptReport)) {
	before := c.attempted
	c.attempted = func(r attemptReport) {
		if before != nil {
			before(r)
		}
		tell(AttemptReport{Script: r.script, Reply: r.reply, Entry: r.entry, Err: r.err})
	}
}
