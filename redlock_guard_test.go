package dlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// uptimeOf is a server's uptime as INFO gives it, in whole seconds.
func uptimeOf(t testing.TB, ctx context.Context, srv *redistest.Server) time.Duration {
	t.Helper()
	info, err := srv.Client().Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "uptime_in_seconds:"); ok {
			s, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return time.Duration(s) * time.Second
		}
	}
	t.Fatal("INFO gives no uptime_in_seconds")
	return 0
}

// waitUptime returns once every server has been up for at least d: the
// restart guard lets only such nodes vote. INFO counts uptime between whole
// seconds, so only a count a second above d proves d.
func waitUptime(t testing.TB, ctx context.Context, servers []*redistest.Server, d time.Duration) {
	t.Helper()
	eventually(t, ctx, "the servers being up for "+d.String(), func() bool {
		for _, srv := range servers {
			if uptimeOf(t, ctx, srv) < d+time.Second {
				return false
			}
		}
		return true
	})
}

func TestRedlock_ANodeRestartedWithinTheGuardDoesNotVoteEvenForANewProcess(t *testing.T) {
	t.Parallel() // waits on servers and timers of its own, not on the CPU
	const guard = 5 * time.Second
	servers := redistest.StartMasters(t, 3)
	ctx := ctxFor(t, time.Minute)
	opts := []dlock.Option{dlock.WithTTL(2 * time.Second), dlock.WithNodeTimeout(200 * time.Millisecond), dlock.WithRestartGuard(guard)}
	name := lockName(t)
	waitUptime(t, ctx, servers, guard)

	restarted := time.Now()
	servers[0].Restart()
	servers[1].Restart()
	// A process that never saw the nodes before their restart; and one
	// whose clients were connected before it made its Redlock.
	fresh := redlockOver(t, servers, opts...).Mutex(name)
	var connected []redis.UniversalClient
	for _, srv := range servers {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		connected = append(connected, rdb)
	}
	for what, m := range map[string]*dlock.RedlockMutex{
		"a new process":          fresh,
		"over connected clients": dlock.NewRedlock(connected, opts...).Mutex(name),
	} {
		lease, err := m.TryLock(ctx)
		if time.Since(restarted) >= guard {
			t.Skipf("the machine took %v to restart and ask: longer than the guard, nothing to show", time.Since(restarted))
		}
		var quorum *dlock.QuorumError
		if !errors.As(err, &quorum) || !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("%s with 2 of 3 nodes restarted %v ago: %v, %v; want ErrUnavailable, not ErrNotAcquired", what, time.Since(restarted), lease, err)
		}
		for _, node := range quorum.Nodes {
			if node.Node == 2 || !strings.Contains(node.Err.Error(), "restart guard") {
				t.Errorf("%s: node %d: %v; want only the restarted nodes kept out by the restart guard", what, node.Node, node.Err)
			}
		}
		if quorum.Granted != 1 || len(quorum.Nodes) != 2 {
			t.Fatalf("%s: %v: want the one node that did not restart to vote, the two that did to be named", what, err)
		}
		t.Logf("%s refused: %v", what, err)
	}

	// Once up for the guard, they vote again.
	waitUptime(t, ctx, servers[:2], guard)
	lease, err := fresh.TryLock(ctx)
	if err != nil {
		t.Fatalf("nodes up for the guard: %v", err)
	}
	_ = lease.Unlock(ctx)
}

func TestRedlock_ANodeThatRefusesINFODoesNotVoteAndSaysWhy(t *testing.T) {
	var servers []*redistest.Server
	var clients []redis.UniversalClient
	for range 3 {
		srv := redistest.Start(t, redistest.UserArgs("locks", "secret-locks", redistest.DlockACL)...) // no +info
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "locks", Password: "secret-locks", MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		servers, clients = append(servers, srv), append(clients, rdb)
	}
	ctx := ctxFor(t, time.Minute)
	opts := []dlock.Option{dlock.WithTTL(2 * time.Second), dlock.WithNodeTimeout(200 * time.Millisecond), dlock.WithRestartGuard(time.Second)}
	name := lockName(t)

	_, err := dlock.NewRedlock(clients, opts...).Mutex(name).TryLock(ctx)
	var quorum *dlock.QuorumError
	if !errors.As(err, &quorum) || errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, dlock.ErrPermission) {
		t.Fatalf("TryLock on nodes that refuse INFO: %v; want ErrPermission, never ErrNotAcquired", err)
	}
	if quorum.Granted != 0 || len(quorum.Nodes) != 3 {
		t.Fatalf("%v: want every node named", err)
	}
	for _, node := range quorum.Nodes {
		if !strings.Contains(node.Err.Error(), "cannot read INFO") {
			t.Errorf("node %d: %v; want it to say it cannot read INFO", node.Node, node.Err)
		}
	}
	if n := heldOn(t, ctx, servers, name); n != 0 {
		t.Fatalf("the refused attempt is held on %d nodes", n)
	}
	t.Logf("refused: %v", err)
	// Waiting would not help: Lock says so at once rather than at ctx's end.
	if _, err := dlock.NewRedlock(clients, opts...).Mutex(name).Lock(ctx); !errors.Is(err, dlock.ErrPermission) || ctx.Err() != nil {
		t.Fatalf("Lock on nodes that refuse INFO: %v; want ErrPermission before the context ends", err)
	}

	// With the guard off (nodes that persist every write), INFO is not needed.
	lease, err := dlock.NewRedlock(clients, append(opts, dlock.WithRestartGuard(0))...).Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("guard off, INFO refused: %v", err)
	}
	_ = lease.Unlock(ctx)
}
