package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/check"
	"github.com/dlockio/dlock/internal/redistest"
)

// redlockOver makes a Redlock with its own go-redis clients of servers, as
// a separate process would have. Its restart guard is off unless opts turn
// it on: the servers of a test are too young to vote under it.
func redlockOver(t testing.TB, servers []*redistest.Server, opts ...dlock.Option) *dlock.Redlock {
	clients := make([]redis.UniversalClient, len(servers))
	for i, srv := range servers {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		clients[i] = rdb
	}
	return mustRedlock(t, clients, append([]dlock.Option{dlock.WithRestartGuard(0)}, opts...)...)
}

// mustRedlock is NewRedlock's Redlock, for arguments it takes.
func mustRedlock(t testing.TB, clients []redis.UniversalClient, opts ...dlock.Option) *dlock.Redlock {
	t.Helper()
	r, err := dlock.NewRedlock(clients, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// hookedClients is a client of each server, connected before a test times
// anything, with hooksOf(i) added to the i-th's.
func hookedClients(t testing.TB, ctx context.Context, servers []*redistest.Server, hooksOf func(i int) []redis.Hook) []redis.UniversalClient {
	t.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	for i, srv := range servers {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for _, hook := range hooksOf(i) {
			rdb.AddHook(hook)
		}
		clients[i] = rdb
	}
	return clients
}

// heldOn counts the servers where the lock is held by anyone.
func heldOn(t testing.TB, ctx context.Context, servers []*redistest.Server, name string) int {
	t.Helper()
	n := 0
	for _, srv := range servers {
		if srv.Client().Exists(ctx, lockKey(name)).Val() == 1 {
			n++
		}
	}
	return n
}

func TestRedlock_ContendedClientsNeverOverlapAndTokensIncrease(t *testing.T) {
	const clients, rounds = 16, 12
	servers := redistest.StartMasters(t, 5)
	name := lockName(t)
	var res check.Fenced
	mutexes := make([]*dlock.RedlockMutex, clients)
	for i := range mutexes {
		mutexes[i] = redlockOver(t, servers, dlock.WithTTL(2*time.Second), dlock.WithNodeTimeout(50*time.Millisecond)).Mutex(name)
	}
	runWorkers(t, clients, func(ctx context.Context, worker int) error {
		for range rounds {
			asked := time.Now()
			lease, err := mutexes[worker].Lock(ctx)
			if err != nil {
				return err
			}
			if validity, err := lease.TTL(ctx); err != nil || validity <= 0 {
				return errors.Join(errors.New("a lease returned without validity left"), err)
			}
			res.Enter(worker, lease.Token(), asked)
			res.Exit(worker)
			// What is checked is exclusion and token order. An Unlock whose
			// nodes did not answer within the 50 ms node timeout (a loaded
			// machine) leaves holds that expire with their TTL: others wait
			// longer, and nothing overlaps. A node that answers "not held
			// there" may never have had the hold: the Lock's answer from it
			// came too late. Any other failure fails the test.
			if err := lease.Unlock(ctx); onlyTimedOut(err) {
				t.Logf("worker %d: %v", worker, err)
			} else if err != nil {
				return err
			}
		}
		return nil
	})
	if got := res.Result(); got.Completed != clients*rounds || got.Overlaps != 0 || got.Stale != 0 {
		t.Fatalf("%+v; want %d completed, 0 overlaps, tokens strictly increasing", got, clients*rounds)
	}
}

// onlyTimedOut reports whether err is a Redlock's QuorumError whose every
// failed node did not answer in time or did not hold it (none refused).
func onlyTimedOut(err error) bool {
	var quorum *dlock.QuorumError
	if !errors.As(err, &quorum) || len(quorum.Nodes) == 0 {
		return false
	}
	for _, n := range quorum.Nodes {
		if !errors.Is(n.Err, context.DeadlineExceeded) && !errors.Is(n.Err, dlock.ErrNotHeldThere) {
			return false
		}
	}
	return true
}

// A Redlock with two of five masters down, one stopped (it answers
// nothing) and one killed, still takes and releases the lock, each phase
// waiting out the node timeout on the stopped one. That timeout is
// generous: it times the stopped master, not the three others, which
// must all answer within it (at 50 ms a loaded machine failed an Unlock).
func TestRedlock_MinorityDownStillLocks(t *testing.T) {
	t.Parallel() // waits on servers and timers of its own, not on the CPU
	const attempts, nodeTimeout = 2, time.Second
	servers := redistest.StartMasters(t, 5)
	ctx := ctxFor(t, time.Minute)
	rl := redlockOver(t, servers, dlock.WithTTL(10*time.Second), dlock.WithNodeTimeout(nodeTimeout))
	servers[1].Pause() // hangs: answers nothing until the node timeout
	servers[3].Kill()  // refuses connections
	defer servers[1].Resume()
	name := lockName(t)
	var last uint64
	for range attempts {
		began := time.Now()
		lease, err := rl.Mutex(name).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock with 2 of 5 masters down: %v", err)
		}
		if lease.Token() <= last {
			t.Fatalf("token %d after %d", lease.Token(), last)
		}
		last = lease.Token()
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("Unlock with 2 of 5 masters down: %v", err)
		}
		t.Logf("TryLock and Unlock in %v with a %v node timeout", time.Since(began), nodeTimeout)
	}
}

func TestRedlock_MajorityDownFailsFastAndLeavesNoHold(t *testing.T) {
	const nodeTimeout = 100 * time.Millisecond
	servers := redistest.StartMasters(t, 5)
	ctx := ctxFor(t, time.Minute)
	rl := redlockOver(t, servers, dlock.WithTTL(10*time.Second), dlock.WithNodeTimeout(nodeTimeout))
	name := lockName(t)
	servers[0].Pause()
	servers[2].Pause()
	servers[4].Kill()
	began := time.Now()
	_, err := rl.Mutex(name).TryLock(ctx)
	took := time.Since(began)
	var quorum *dlock.QuorumError
	var node *dlock.NodeError
	if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotAcquired) || !errors.As(err, &quorum) || !errors.As(err, &node) {
		t.Fatalf("TryLock with 3 of 5 nodes down: %v; want a QuorumError naming the nodes, matching ErrUnavailable, not ErrNotAcquired", err)
	}
	if quorum.Granted != 2 || len(quorum.Nodes) != 3 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v: want 2 granted, 3 nodes failed (two timed out)", err)
	}
	t.Logf("failed in %v: %v", took, err)
	// One node timeout for the attempt, one for releasing it where it
	// answered; the margin is for a loaded machine.
	if took > 2*nodeTimeout+time.Second {
		t.Fatalf("a failed attempt took %v with a %v node timeout", took, nodeTimeout)
	}
	if n := heldOn(t, ctx, []*redistest.Server{servers[1], servers[3]}, name); n != 0 {
		t.Fatalf("the failed attempt is still held on %d nodes that answered", n)
	}
	// The paused nodes get the attempt when they wake, and its release
	// after it: no node keeps the failed attempt.
	servers[0].Resume()
	servers[2].Resume()
	eventually(t, ctx, "the paused nodes dropping the failed attempt", func() bool {
		return heldOn(t, ctx, servers[:4], name) == 0
	})
}

func TestRedlock_NodesRestartedEmptyDoNotLetASecondOwnerIn(t *testing.T) {
	t.Parallel() // waits on servers and timers of its own, not on the CPU
	for _, guard := range []time.Duration{5 * time.Second, 0} {
		t.Run(map[bool]string{true: "guarded", false: "unguarded"}[guard > 0], func(t *testing.T) {
			servers := redistest.StartMasters(t, 5)
			ctx := ctxFor(t, time.Minute)
			opts := []dlock.Option{dlock.WithTTL(3 * time.Second), dlock.WithNodeTimeout(200 * time.Millisecond), dlock.WithRestartGuard(guard)}
			waitUptime(t, ctx, servers, guard)
			name := lockName(t)
			first := redlockOver(t, servers, opts...).Mutex(name)
			second := redlockOver(t, servers, opts...).Mutex(name)
			// The second has known every node before their restart. Lock,
			// not TryLock: a first attempt on fresh servers loads the
			// Mutex scripts, and may take longer than a node timeout.
			warm, err := second.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_ = warm.Unlock(ctx)
			held, err := first.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			restarted := time.Now()
			for _, srv := range servers[:3] { // a majority comes back empty
				srv.Restart()
			}
			// The restarted nodes are fresh again: the second's first vote
			// there dials and may load the scripts, which may take longer
			// than a node timeout. Guarded, one attempt: they must not
			// vote, however fast. Unguarded, Lock: it gets in only where
			// the restarted nodes grant, the others being held.
			var lease *dlock.Lease
			if guard > 0 {
				lease, err = second.TryLock(ctx)
			} else {
				lease, err = second.Lock(ctx)
			}
			if guard > 0 && time.Since(restarted) >= guard {
				t.Skipf("the machine took %v to restart and ask: longer than the guard, nothing to show", time.Since(restarted))
			}
			if guard > 0 {
				if !errors.Is(err, dlock.ErrUnavailable) {
					t.Fatalf("second owner after a majority restarted within the TTL: %v, %v; want refused, the restarted nodes not voting yet (ErrUnavailable)", lease, err)
				}
				t.Logf("refused: %v", err)
			} else if err != nil {
				t.Fatalf("without the guard the restarted nodes vote, so the second owner gets in (the danger the guard prevents): %v", err)
			}
			// The first owner's renewal meets the restarted nodes: its lease
			// reports the loss rather than going on as if it held a majority.
			// One no majority answered in time is undecided (ErrUnavailable),
			// and is sent again.
			err = held.Extend(ctx, 30*time.Second)
			for tries := 1; errors.Is(err, dlock.ErrUnavailable) && tries < 10; tries++ {
				t.Logf("Extend undecided: %v", err)
				err = held.Extend(ctx, 30*time.Second)
			}
			if !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("Extend with the hold gone from a majority: %v; want ErrNotHeld", err)
			}
			waitDone(t, held.Done(), lossGuard, "the first owner's loss")
		})
	}
}

func TestRedlock_BadInput(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	servers := redistest.StartMasters(t, 3)
	var clients []redis.UniversalClient
	counter := &commandCounter{}
	for _, srv := range servers {
		rdb := srv.Client()
		rdb.AddHook(counter)
		clients = append(clients, rdb)
	}
	for what, nodes := range map[string][]redis.UniversalClient{
		"2 nodes":            clients[:2],
		"4 nodes":            append(clients, clients[0]),
		"no nodes":           nil,
		"a nil node":         {clients[0], nil, clients[2]},
		"a nil *Client":      {clients[0], (*redis.Client)(nil), clients[2]},
		"an unmade *Client":  {clients[0], &redis.Client{}, clients[2]},
		"a Client's options": clients, // given below
	} {
		var opts []dlock.Option
		if what == "a Client's options" {
			opts = append(opts, dlock.WithReplicaAck(1, time.Second))
		}
		if r, err := dlock.NewRedlock(nodes, opts...); !errors.Is(err, dlock.ErrInvalid) || r != nil {
			t.Errorf("NewRedlock of %s: %v, %v; want nil, ErrInvalid", what, r, err)
		}
	}
	r := mustRedlock(t, clients)
	for _, m := range []*dlock.RedlockMutex{
		{}, // a zero RedlockMutex, made without a Redlock
		(&dlock.Redlock{}).Mutex("x"),
		r.Mutex(""),
		r.Mutex("x", dlock.WithTTL(time.Second), dlock.WithNodeTimeout(time.Second)),
		r.Mutex("x", dlock.WithNodeTimeout(-time.Millisecond)),
		r.Mutex("x", dlock.WithRestartGuard(-time.Millisecond)),
		r.Mutex("x", dlock.WithRestartGuard(dlock.MaxTTL+time.Millisecond)),
		(*dlock.Redlock)(nil).Mutex("x"),
	} {
		if _, err := m.Lock(ctx); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Lock of %q: %v; want ErrInvalid", m.Name(), err)
		}
	}
	if n := counter.commands.Load(); n != 0 {
		t.Fatalf("%d commands sent for invalid Redlocks, want 0", n)
	}
	name := lockName(t)
	if err := servers[1].Client().HSet(ctx, lockKey(name), "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Mutex(name).Lock(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Lock with a hash under the name on one node: %v; want ErrWrongType", err)
	}
	if n := heldOn(t, ctx, []*redistest.Server{servers[0], servers[2]}, name); n != 0 {
		t.Fatalf("a failed Lock left holds on %d nodes", n)
	}
}

func TestRedlock_LeaseRenewsOnAMajority(t *testing.T) {
	const ttl = 400 * time.Millisecond
	servers := redistest.StartMasters(t, 5)
	ctx := ctxFor(t, time.Minute)
	name := lockName(t)
	opts := []dlock.Option{dlock.WithTTL(ttl), dlock.WithNodeTimeout(40 * time.Millisecond)}
	lease, err := redlockOver(t, servers, opts...).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	servers[0].Pause()
	servers[4].Pause()
	defer servers[0].Resume()
	defer servers[4].Resume()
	// Several TTLs on renewals alone, two nodes not answering.
	for until := time.Now().Add(3 * ttl); time.Now().Before(until); {
		select {
		case <-lease.Done():
			t.Fatalf("lease ended while a majority renewed it: %v", lease.Err())
		case <-time.After(ttl / 4):
		}
	}
	if _, err := redlockOver(t, servers, opts...).Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("another owner during a renewed hold: %v; want ErrNotAcquired", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := heldOn(t, ctx, servers[1:4], name); n != 0 {
		t.Fatalf("held on %d answering nodes after Unlock", n)
	}
}

// An Extend to a shorter TTL that a majority did not confirm may still have
// been applied (a stalled node runs it when it resumes): the lease counts
// on no more than the shorter TTL would leave, and renews at it, as a
// single server's lease does (TestLease_FailedExtendToAShorterTTLCountsOnTheShorterOne).
func TestRedlock_FailedExtendToAShorterTTLCountsOnTheShorterOne(t *testing.T) {
	servers := redistest.StartMasters(t, 3)
	ctx := ctxFor(t, 30*time.Second)
	lease, err := redlockOver(t, servers, dlock.WithTTL(30*time.Second)).Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Extend(ctx, 30*time.Second); err != nil { // the script is loaded
		t.Fatal(err)
	}
	servers[0].Pause()
	servers[1].Pause()
	sent := time.Now()
	err = lease.Extend(ctx, 2*time.Second) // waits in the stalled servers' sockets
	servers[0].Resume()
	servers[1].Resume()
	if err == nil {
		t.Fatal("Extend with a majority stalled returned nil")
	}
	if d := lease.Deadline(); d.After(sent.Add(2 * time.Second)) {
		t.Fatalf("deadline %v after the failed Extend(2s); want within 2s of its sending", time.Until(d))
	}
	// Renewed at the shorter TTL, the lease holds on: a renewal moves its
	// deadline past what the shorter TTL left it.
	eventually(t, ctx, "a renewal after the failed Extend", func() bool {
		return lease.Err() != nil || lease.Deadline().After(sent.Add(2*time.Second))
	})
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost after the failed Extend: %v", err)
	}
}

// ErrNotHeld says there was nothing of ours left to release or extend. A
// Redlock whose nodes do not answer cannot know that: its Unlock and
// Extend fail with ErrUnavailable, not ErrNotHeld; a majority that
// answered "not held" is ErrNotHeld.
func TestRedlock_NodesThatDoNotAnswerAreUnavailableNotNotHeld(t *testing.T) {
	// Long enough for a node that is not paused to answer on a loaded
	// machine: one that times out too would make the test's answer.
	const nodeTimeout = 500 * time.Millisecond
	servers := redistest.StartMasters(t, 3)
	ctx := ctxFor(t, time.Minute)
	rl := redlockOver(t, servers, dlock.WithTTL(10*time.Second), dlock.WithNodeTimeout(nodeTimeout))
	lease, err := rl.Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	servers[0].Pause()
	servers[1].Pause()
	extendErr := lease.Extend(ctx, 20*time.Second)
	unlockErr := lease.Unlock(ctx)
	servers[0].Resume()
	servers[1].Resume()
	for what, err := range map[string]error{"Extend": extendErr, "Unlock": unlockErr} {
		var quorum *dlock.QuorumError
		if !errors.As(err, &quorum) || errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrUnavailable) {
			t.Errorf("%s with 2 of 3 nodes not answering: %v; want a QuorumError matching ErrUnavailable, not ErrNotHeld", what, err)
		}
	}

	// One node refusing is no majority either: the one that did not
	// answer may hold it still.
	for _, what := range []string{"Extend", "Unlock"} {
		name := lockName(t)
		lease, err := rl.Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := servers[0].Client().Del(ctx, lockKey(name)).Err(); err != nil {
			t.Fatal(err)
		}
		servers[1].Pause()
		if what == "Extend" {
			err = lease.Extend(ctx, 20*time.Second)
		} else {
			err = lease.Unlock(ctx)
		}
		servers[1].Resume()
		if errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrUnavailable) {
			t.Errorf("%s with 1 of 3 nodes refusing and 1 not answering: %v; want ErrUnavailable, not ErrNotHeld", what, err)
		}
		_ = lease.Unlock(ctx)
	}

	// A majority that no longer holds it says so; no node is paused, so
	// they have the default node timeout to answer in.
	other, err := redlockOver(t, servers, dlock.WithTTL(10*time.Second)).Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers[:2] {
		if err := s.Client().FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrUnavailable) {
		t.Errorf("Unlock with the hold gone from 2 of 3 nodes: %v; want ErrNotHeld", err)
	}
}

// A Redlock master that forgot the scripts (SCRIPT FLUSH, a restart with
// its data) gets them again from the call that met NOSCRIPT there: the
// lock is taken, renewed and released on every master, not on the others
// alone.
func TestRedlock_AFlushedMasterIsGivenTheScriptsAgain(t *testing.T) {
	servers := redistest.StartMasters(t, 3)
	rl := redlockOver(t, servers)
	ctx := ctxFor(t, time.Minute)
	name := lockName(t)
	warm, err := rl.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := forgetScripts(ctx, servers[1].Client()); err != nil {
		t.Fatal(err)
	}
	lease, err := rl.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := heldOn(t, ctx, servers, name); n != len(servers) {
		t.Fatalf("held on %d masters of %d after one forgot the scripts", n, len(servers))
	}
	if err := forgetScripts(ctx, servers[1].Client()); err != nil {
		t.Fatal(err)
	}
	if err := lease.Extend(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl := servers[1].Client().PTTL(ctx, lockKey(name)).Val(); ttl < 10*time.Second {
		t.Fatalf("the flushed master's hold lasts %v after an Extend to 20s", ttl)
	}
	if err := forgetScripts(ctx, servers[1].Client()); err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := heldOn(t, ctx, servers, name); n != 0 {
		t.Fatalf("held on %d masters after Unlock", n)
	}
}
