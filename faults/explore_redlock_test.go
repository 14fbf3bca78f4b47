//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// redlockGuard is the explored Redlocks' restart guard: at least the
// longest TTL a schedule draws (3 s), as the guard's contract asks, so a
// master restarted empty votes again only once every hold it lost has
// expired on the others.
const redlockGuard = 3 * time.Second

// redlockMasters is how many masters an explored Redlock has.
const redlockMasters = 3

// waitVoting returns once the Redlock's masters are old enough to vote.
func waitVoting(t *testing.T, masters []*redistest.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), redlockGuard+10*time.Second)
	defer cancel()
	waitUptime(t, ctx, masters, redlockGuard)
}

// newExploredRedlock is a Redlock over masters; renewals, if not nil,
// records what came of its leases' renewals.
func newExploredRedlock(masters []redis.UniversalClient, renewals *redlockRenewals) *dlock.Redlock {
	r, err := dlock.NewRedlock(masters, dlock.WithRestartGuard(redlockGuard), dlock.WithObserver(renewals.observer()))
	if err != nil {
		panic(err) // three masters and valid options: the explorer's bug
	}
	return r
}

// redlockRenewals are the failed renewals of a run's Redlock leases, by
// lock name and token, as each Redlock's Observer was told them: what a
// lease's loss came of.
type redlockRenewals struct {
	mu     sync.Mutex
	failed map[string][]error
}

func newRedlockRenewals() *redlockRenewals {
	return &redlockRenewals{failed: map[string][]error{}}
}

func (r *redlockRenewals) observer() *dlock.Observer {
	if r == nil {
		return nil
	}
	return &dlock.Observer{Renewal: func(ev dlock.RenewalEvent) {
		if ev.Result != dlock.RenewalFailed {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		key := fmt.Sprint(ev.Name, "#", ev.Token)
		r.failed[key] = append(r.failed[key], ev.Err)
	}}
}

// explains reports whether the loss of the Redlock lease of name and
// token came of its masters' answers alone (see quorumMissed), and the
// last failed renewal's error, which says how.
func (r *redlockRenewals) explains(name string, token uint64, loss error, masters int) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	failed := r.failed[fmt.Sprint(name, "#", token)]
	if len(failed) == 0 {
		return false, nil
	}
	return quorumMissed(loss, failed, masters), failed[len(failed)-1]
}

// quorumMissed reports whether a Redlock lease of masters was lost as
// Redlock loses a lease, whatever the run's faults: no renewal confirmed
// before its deadline (LossUnreachable, no majority refused), each that
// failed confirmed by fewer than a majority of masters (one a majority
// confirmed too late is no excuse: a renewal waits no longer than the node
// timeout, a fiftieth of the TTL, and a Redlock that wanted more than a
// majority said so too), every other master
// either not answering within the node timeout (a paused master, one slow
// to answer, or to load the scripts again after SCRIPT FLUSH) or
// answering that the hold is not there. A lease may hold on a bare
// majority: a master's grant may miss the node timeout, or another's hold
// be left there by a release the node timeout cut short; one of the two
// paused, it cannot be renewed (issue 17: seed 4 of -explore.kinds=
// redlock,mutex -explore.faults=scriptflush,pause -explore.cluster=true).
//
// A real early loss stays unexplained: a majority that refused (the hold
// gone from it: LossExpired), a renewal a majority confirmed that failed
// all the same, any other error of a master (NOSCRIPT, a script's).
func quorumMissed(loss error, failed []error, masters int) bool {
	if !errors.Is(loss, dlock.LossUnreachable) || len(failed) == 0 {
		return false
	}
	majority := masters/2 + 1
	for _, err := range failed {
		var q *dlock.QuorumError
		switch {
		case errors.As(err, &q):
			if q.Granted >= majority {
				return false
			}
			for _, n := range q.Nodes {
				if !errors.Is(n.Err, context.DeadlineExceeded) && !isTimeout(n.Err) && !strings.HasPrefix(n.Err.Error(), notHeldThere) {
					return false
				}
			}
		case !errors.Is(err, dlock.LossUnreachable): // else confirmed past the deadline
			return false
		}
	}
	return true
}

// notHeldThere begins a master's answer that a lease's hold is not there
// (dlock's errNotHeldThere, which is not exported: a Redlock's hold on one
// master is not the lease's).
const notHeldThere = "not held there"

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// checkRedlockSettled: no Redlock held by one owner on a quorum of
// masters once every holder let go, nor on any master by an owner no late
// copy of an acquire (lateOwners) explains. A single master may keep a
// hold for its TTL, where a fault or the node timeout cut its release
// short (doubtful), or a late copy of a granting attempt took it again
// after the lease's release (a Redlock's release writes no tombstone), as
// documented; holds of different owners, one master each, are no quorum
// of anyone's.
func checkRedlockSettled(ctx context.Context, masters []redis.UniversalClient, s *schedule, doubtful, lateOwners map[string]bool, out *outcome) {
	for _, name := range s.names["redlock"] {
		out.checks++
		owners := map[string]int{}
		var held []string
		for i, m := range masters {
			// A Redlock's hold is a Mutex's: its value the owner token.
			owner, err := m.Get(ctx, lockKey(name)).Result()
			if err != nil {
				continue
			}
			owners[owner]++
			held = append(held, fmt.Sprintf("master %d: owner …%s", i, owner[max(0, len(owner)-6):]))
		}
		if doubtful[name] || s.has("pause") || s.has("flushall") || s.has("restart") {
			continue
		}
		most, unexplained := 0, 0
		for owner, n := range owners {
			most = max(most, n)
			if !lateOwners[owner] {
				unexplained += n
			}
		}
		switch {
		case most > len(masters)/2:
			out.violate("orphan: Redlock %s is held by one owner on %d of %d masters after every holder let go (%s)", name, most, len(masters), strings.Join(held, ", "))
		case unexplained > 0 && !s.has("network") && !s.has("freeze") && !s.has("rlfailover"):
			// A toxic may hold an acquire back until the lease's release
			// has passed it on another connection, with no copy of ours
			// (the review of 123b671); a frozen holder's node hooks hold
			// its clean-ups back until they fail, undoubted; a failover of
			// node 0 may bring back a hold whose release it lost.
			out.violate("orphan: Redlock %s is held on %d of %d masters after every holder let go, by an owner no late copy of an acquire explains (%s)", name, unexplained, len(masters), strings.Join(held, ", "))
		}
	}
}

// waitCleanUps returns once no clean-up (a release or an abandon) has
// been in flight at hooks for cleanUpsQuiet and as many looks, or after
// CleanupTimeout and more, which bounds each. dlock does not wait for
// every clean-up it sends: a Redlock's for a master past the node timeout
// goes on (an Unlock's release, an abandon, sent in the background for a
// master that had not answered the attempt), and may land after the call
// returned; a check of what is left must not read the masters before it
// did.
func waitCleanUps(ctx context.Context, hooks []*commandFaults) {
	ctx, cancel := context.WithTimeout(ctx, 2*dlock.CleanupTimeout)
	defer cancel()
	quietSince, looks := time.Now(), 0
	for time.Since(quietSince) < cleanUpsQuiet || looks < cleanUpsLooks {
		looks++
		if slices.ContainsFunc(hooks, func(h *commandFaults) bool { return h.cleaning.Load() > 0 }) {
			quietSince, looks = time.Now(), 0
		}
		if sleepCtx(ctx, cleanUpsQuiet/cleanUpsLooks) != nil {
			return
		}
	}
}

// A goroutine dlock has just started for a clean-up reaches its hook
// within cleanUpsQuiet, unless the machine starves the process (a soak
// fills both cores): then the looks, each after a sleep that lets it run,
// wait for it.
const (
	cleanUpsQuiet = 50 * time.Millisecond
	cleanUpsLooks = 10
)
