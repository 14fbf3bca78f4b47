package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// slowLoads makes every round trip that loads scripts (SCRIPT LOAD,
// FUNCTION LOAD) take delay longer: a server busy compiling them, or a
// loaded machine.
type slowLoads struct{ delay time.Duration }

func (h slowLoads) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h slowLoads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.wait([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h slowLoads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.wait(cmds)
		return next(ctx, cmds)
	}
}

func (h slowLoads) wait(cmds []redis.Cmder) {
	for _, cmd := range cmds {
		if args := cmd.Args(); len(args) > 1 && (cmd.Name() == "script" || cmd.Name() == "function") && args[1] == "load" {
			time.Sleep(h.delay) // the injected slowness, not a wait for an event
			return
		}
	}
}

// A Redlock's first vote on a node that does not have dlock's scripts (a
// fresh, flushed or restarted one) is not lost to loading them, even when
// the load takes longer than a vote may (the node timeout, 10 ms at a TTL
// of 300 ms): the scripts are loaded before the vote's clock starts.
func TestRedlock_AFirstVoteOnColdNodesIsNotLostToLoadingScripts(t *testing.T) {
	servers := redistest.StartMasters(t, 3)
	ctx := ctxFor(t, time.Minute)
	for round := range 10 {
		for _, srv := range servers {
			if err := forgetScripts(ctx, srv.Client()); err != nil {
				t.Fatal(err)
			}
		}
		clients := hookedClients(t, ctx, servers, func(int) []redis.Hook { return []redis.Hook{slowLoads{50 * time.Millisecond}} })
		rl, err := dlock.NewRedlock(clients, dlock.WithRestartGuard(0), dlock.WithTTL(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		lease, err := rl.Mutex(lockName(t)).TryLock(ctx)
		if err != nil {
			t.Fatalf("round %d: the first TryLock on cold nodes: %v", round, err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
