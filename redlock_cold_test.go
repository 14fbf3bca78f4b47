package dlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// coldNode is a hook on one node's client: it makes every round trip that
// loads scripts (SCRIPT LOAD, FUNCTION LOAD) take delay longer, as on a
// server busy compiling them or a loaded machine, and numbers in order the
// loads' starts and ends and the first script call (the vote).
type coldNode struct {
	delay time.Duration
	mu    sync.Mutex
	seq   int
	vote  int // the first script call's number; 0: none yet
	loads []loadSeen
}

// loadSeen is one load round trip: its numbers when sent and when ended
// (0: not yet), whether it loaded, and the time its context left it when
// sent (bounded: it had an end).
type loadSeen struct {
	sent, ended int
	loaded      bool
	budget      time.Duration
	bounded     bool
}

func (h *coldNode) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *coldNode) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.around(ctx, []redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (h *coldNode) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.around(ctx, cmds, func() error { return next(ctx, cmds) })
	}
}

func (h *coldNode) around(ctx context.Context, cmds []redis.Cmder, send func() error) error {
	load := slices.ContainsFunc(cmds, func(cmd redis.Cmder) bool {
		args := cmd.Args()
		return len(args) > 1 && (cmd.Name() == "script" || cmd.Name() == "function") && args[1] == "load"
	})
	call := slices.ContainsFunc(cmds, func(cmd redis.Cmder) bool { return cmd.Name() == "fcall" || cmd.Name() == "evalsha" })
	h.mu.Lock()
	h.seq++
	if call && h.vote == 0 && !load {
		h.vote = h.seq
	}
	at := len(h.loads)
	if load {
		seen := loadSeen{sent: h.seq}
		if deadline, ok := ctx.Deadline(); ok {
			seen.budget, seen.bounded = time.Until(deadline), true
		}
		h.loads = append(h.loads, seen)
	}
	h.mu.Unlock()
	if !load {
		return send()
	}
	time.Sleep(h.delay) // the injected slowness, not a wait for an event
	err := send()
	h.mu.Lock()
	h.seq++
	h.loads[at].ended = h.seq
	h.loads[at].loaded = err == nil || strings.Contains(err.Error(), "already exists")
	h.mu.Unlock()
	return err
}

// verdict is what the node saw so far: whether its vote was sent, after
// its scripts were loaded; whether a load given more time than a vote and
// begun before it had not ended by then (a preload starved past its
// wait); and the least time a load had left when sent.
func (h *coldNode) verdict(voteTime time.Duration) (voted, preloaded, cut bool, leastBudget time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	leastBudget = time.Hour
	for _, load := range h.loads {
		if load.bounded {
			leastBudget = min(leastBudget, load.budget)
		}
		switch {
		case h.vote == 0 || load.sent > h.vote:
		case load.ended != 0 && load.ended < h.vote && load.loaded:
			preloaded = true
		case !load.bounded || load.budget > voteTime:
			cut = true
		}
	}
	return h.vote != 0, preloaded, cut, leastBudget
}

// A Redlock's first vote on a node that does not have dlock's scripts (a
// fresh or flushed one) is not lost to loading them, even when the load
// takes longer than a vote may (the node timeout): the scripts are loaded
// before the vote is sent, with a wait of their own. Timing is not what
// decides it: each node's hook sees whether its vote was sent after the
// load ended, and whether a load ever had no more time than a vote. A
// round whose votes timed out without that, or whose preload was cut
// short by its wait, was starved of CPU: it shows nothing, and another
// round is run.
func TestRedlock_AFirstVoteOnColdNodesIsNotLostToLoadingScripts(t *testing.T) {
	const (
		nodeTimeout = 20 * time.Millisecond
		loadDelay   = 2 * nodeTimeout // and less than the preload's own wait
		wanted      = 10              // rounds that took the lock
	)
	servers := redistest.StartMasters(t, 3)
	ctx := ctxFor(t, time.Minute)
	won, starved := 0, 0
	for round := 0; won < wanted; round++ {
		if round == 3*wanted {
			t.Skipf("%d of %d rounds starved of CPU: too few to show anything", starved, round)
		}
		for _, srv := range servers {
			if err := forgetScripts(ctx, srv.Client()); err != nil {
				t.Fatal(err)
			}
		}
		nodes := make([]*coldNode, len(servers))
		clients := hookedClients(t, ctx, servers, func(i int) []redis.Hook {
			nodes[i] = &coldNode{delay: loadDelay}
			return []redis.Hook{nodes[i]}
		})
		rl, err := dlock.NewRedlock(clients, dlock.WithRestartGuard(0),
			dlock.WithTTL(300*time.Millisecond), dlock.WithNodeTimeout(nodeTimeout))
		if err != nil {
			t.Fatal(err)
		}
		lease, err := rl.Mutex(lockName(t)).TryLock(ctx)
		anyCut := false
		for i, node := range nodes {
			voted, preloaded, cut, leastBudget := node.verdict(nodeTimeout)
			anyCut = anyCut || cut
			switch {
			case cut: // a preload starved past its wait: its vote may load, excused
			case voted && !preloaded:
				t.Fatalf("round %d: node %d's first vote was sent before its scripts were loaded (TryLock: %v)", round, i, err)
			case leastBudget <= nodeTimeout:
				t.Fatalf("round %d: node %d loaded scripts within a vote's %v (%v left; TryLock: %v)", round, i, nodeTimeout, leastBudget, err)
			}
		}
		if err != nil && (anyCut || onlyTimeouts(err)) {
			starved++
			t.Logf("round %d: starved of CPU (preload cut short: %v): %v", round, anyCut, err)
			continue
		}
		if err != nil {
			t.Fatalf("round %d: the first TryLock on cold nodes: %v", round, err)
		}
		won++
		// A release a starved node missed is resent in the background.
		if err := lease.Unlock(ctx); err != nil && !onlyTimeouts(err) {
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds took the lock, %d were starved of CPU", won, starved)
}

// onlyTimeouts tells a Redlock error whose failed nodes all failed by not
// answering within the node timeout, or a grant whose validity ran out.
func onlyTimeouts(err error) bool {
	var quorum *dlock.QuorumError
	if !errors.As(err, &quorum) {
		return false
	}
	if quorum.Late { // granted, but the starved attempt's validity ran out
		return true
	}
	for _, node := range quorum.Nodes {
		if !errors.Is(node.Err, context.DeadlineExceeded) {
			return false
		}
	}
	return true
}
