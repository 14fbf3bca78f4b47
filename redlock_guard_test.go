package dlock_test

import (
	"context"
	"errors"
	"net"
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
		"over connected clients": mustRedlock(t, connected, opts...).Mutex(name),
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

	_, err := mustRedlock(t, clients, opts...).Mutex(name).TryLock(ctx)
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
	if _, err := mustRedlock(t, clients, opts...).Mutex(name).Lock(ctx); !errors.Is(err, dlock.ErrPermission) || ctx.Err() != nil {
		t.Fatalf("Lock on nodes that refuse INFO: %v; want ErrPermission before the context ends", err)
	}

	// With the guard off (nodes that persist every write), INFO is not needed.
	lease, err := mustRedlock(t, clients, append(opts, dlock.WithRestartGuard(0))...).Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("guard off, INFO refused: %v", err)
	}
	_ = lease.Unlock(ctx)
}

// Node 0 is a master with a replica, reached through a Sentinel failover
// client, as through any address that follows the master. A takes the
// lock on nodes 0 and 1 while node 2 is cut off; node 0's master dies
// before its replica has A's hold, and the replica, up for longer than
// the guard, is promoted. While A's lease is valid, node 0 must not vote
// for a second owner: not in A's process, which saw the master it
// replaced, nor in a new one, which never saw it. Once the guard has
// passed since it was seen, it votes again.
func TestRedlock_ANodeFailedOverDoesNotVoteWhileTheHoldItLostIsValid(t *testing.T) {
	t.Parallel() // waits on its servers, its Sentinel and the guard, not on the CPU
	const guard = 10 * time.Second
	f := redistest.StartFailover(t)
	servers := redistest.StartMasters(t, 2)
	ctx := ctxFor(t, 2*time.Minute)
	name := lockName(t)
	// A node timeout long enough for a reconnection through the Sentinel,
	// on a loaded machine; a fixed lease, so that no renewal runs.
	opts := []dlock.Option{dlock.WithLeaseTime(guard), dlock.WithNodeTimeout(time.Second), dlock.WithRestartGuard(guard)}
	waitUptime(t, ctx, []*redistest.Server{f.Master, f.Replica, servers[0], servers[1]}, guard)

	var cutA, cutB severed
	processA := failoverRedlock(t, ctx, f, servers, &cutA, opts...)
	if err := f.CutReplica(ctx); err != nil {
		t.Fatal(err)
	}
	cutA.cut.Store(true)
	a, err := processA.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("A on nodes 0 and 1: %v", err)
	}
	f.Master.Kill()
	if err := f.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	cutA.cut.Store(false)
	processB := failoverRedlock(t, ctx, f, servers, &cutB, opts...)

	var refusedAt time.Time
	for _, p := range []struct {
		what string
		r    *dlock.Redlock
	}{{"a new process", processB}, {"A's process", processA}} {
		lease, err := p.r.Mutex(name).TryLock(ctx)
		refusedAt = time.Now()
		if !refusedAt.Before(a.Deadline()) {
			t.Skipf("the failover took %v: longer than A's lease, nothing to show", time.Since(a.Deadline().Add(-guard)))
		}
		if err == nil {
			_ = lease.Unlock(ctx)
			t.Errorf("%s: B granted with A's lease valid for %v more: node 0, failed over, voted", p.what, time.Until(a.Deadline()))
			continue
		}
		var quorum *dlock.QuorumError
		if !errors.As(err, &quorum) || quorum.Granted != 1 || len(quorum.Nodes) != 2 ||
			quorum.Nodes[0].Node != 0 || !strings.Contains(quorum.Nodes[0].Err.Error(), "restart guard") {
			t.Fatalf("%s: %v; want node 0 kept out by the restart guard, node 1 held by A, node 2 granting", p.what, err)
		}
		t.Logf("%s refused: %v", p.what, err)
	}

	// Once the guard has passed since B's process saw node 0, it votes:
	// with node 2 cut off, node 0 and node 1 (A gone) make the majority.
	_ = a.Unlock(ctx)
	eventually(t, ctx, "the guard passing since node 0 was seen", func() bool { return time.Since(refusedAt) >= guard })
	cutB.cut.Store(true)
	lease, err := processB.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("node 0 seen %v ago: %v", time.Since(refusedAt), err)
	}
	_ = lease.Unlock(ctx)
}

// failoverRedlock is a Redlock over clients of its own, as a process
// would have, connected: node 0 through a failover client of f, nodes 1
// and 2 the servers, node 2 behind cut.
func failoverRedlock(t *testing.T, ctx context.Context, f *redistest.Failover, servers []*redistest.Server, cut *severed, opts ...dlock.Option) *dlock.Redlock {
	t.Helper()
	node0 := f.Client()
	eventually(t, ctx, "the failover client reaching the master", func() bool { return node0.Ping(ctx).Err() == nil })
	others := hookedClients(t, ctx, servers, func(i int) []redis.Hook {
		if i == 1 {
			return []redis.Hook{cut}
		}
		return nil
	})
	return mustRedlock(t, append([]redis.UniversalClient{node0}, others...), opts...)
}

// A client that reaches a replica (an address that no longer follows the
// master, a replica left writable) does not count it: what it grants, the
// master never had.
func TestRedlock_AReplicaDoesNotVote(t *testing.T) {
	t.Parallel() // waits on its servers' uptime, not on the CPU
	const guard = 2 * time.Second
	servers := redistest.StartMasters(t, 3)
	host, port, err := net.SplitHostPort(servers[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	replica := redistest.Start(t, "--replicaof", host, port, "--replica-read-only", "no")
	ctx := ctxFor(t, time.Minute)
	name := lockName(t)
	waitUptime(t, ctx, append([]*redistest.Server{replica}, servers[1:]...), guard)
	// Another owner holds the lock on node 2: node 0's vote would decide.
	other, err := newClient(t, servers[2].Client()).Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Unlock(context.Background()) })

	// Connected clients, and a node timeout a loaded machine meets.
	clients := hookedClients(t, ctx, append([]*redistest.Server{replica}, servers[1:]...), func(int) []redis.Hook { return nil })
	opts := []dlock.Option{dlock.WithTTL(guard), dlock.WithRestartGuard(guard), dlock.WithNodeTimeout(guard / 4)}
	lease, err := mustRedlock(t, clients, opts...).Mutex(name).TryLock(ctx)
	var quorum *dlock.QuorumError
	if err == nil {
		_ = lease.Unlock(ctx)
	}
	if !errors.As(err, &quorum) || quorum.Granted != 1 || len(quorum.Nodes) != 2 ||
		quorum.Nodes[0].Node != 0 || !strings.Contains(quorum.Nodes[0].Err.Error(), "not a master") {
		t.Fatalf("TryLock with node 0 a writable replica, node 2 held: %v, %v; want node 0 kept out as not a master", lease, err)
	}
	t.Logf("refused: %v", err)
}

// A Ring or a ClusterClient opens its connections through clients of its
// own, which never pass its dial hook: the restart guard would never hear
// of a restart behind one. NewRedlock refuses them as nodes.
func TestRedlock_ARingOrClusterNodeIsRefused(t *testing.T) {
	servers := redistest.StartMasters(t, 3)
	node := func(i int) redis.UniversalClient {
		rdb := redis.NewClient(&redis.Options{Addr: servers[i].Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": servers[0].Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{servers[0].Addr()}})
	t.Cleanup(func() { _ = cluster.Close() })
	for what, first := range map[string]redis.UniversalClient{"a Ring": ring, "a ClusterClient": cluster} {
		rl, err := dlock.NewRedlock([]redis.UniversalClient{first, node(1), node(2)}, dlock.WithRestartGuard(0))
		if !errors.Is(err, dlock.ErrInvalid) || rl != nil {
			t.Errorf("%s as a Redlock node: %v, %v; want nil, ErrInvalid", what, rl, err)
		}
	}
}
