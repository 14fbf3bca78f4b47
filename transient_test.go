package dlock_test

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
)

// replyError is an error reply as a Redis server sends it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// The errors that pass on their own, as go-redis returns them.
var transientErrors = []struct {
	name string
	err  error
}{
	{"LOADING", replyError("LOADING Redis is loading the dataset in memory")},
	{"CLUSTERDOWN", replyError("CLUSTERDOWN The cluster is down")},
	{"TRYAGAIN", replyError("TRYAGAIN Multiple keys request during rehashing of slot")},
	{"MOVED", replyError("MOVED 3999 127.0.0.1:1")},
	{"MASTERDOWN", replyError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.")},
	{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}},
}

// failAttempts is a go-redis hook that answers the next n runs of script
// with err instead of sending them: Redis never sees them.
type failAttempts struct {
	script *redis.Script
	err    error
	left   atomic.Int64
	failed countdown
}

func (h *failAttempts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failAttempts) intercept(cmd redis.Cmder) bool {
	if !runs(cmd, h.script) || h.left.Add(-1) < 0 {
		return false
	}
	cmd.SetErr(h.err)
	h.failed.add()
	return true
}

func (h *failAttempts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.intercept(cmd) {
			return h.err
		}
		return next(ctx, cmd)
	}
}

func (h *failAttempts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var pass []redis.Cmder
		for _, cmd := range cmds {
			if !h.intercept(cmd) {
				pass = append(pass, cmd)
			}
		}
		if len(pass) == 0 {
			return h.err
		}
		return next(ctx, pass)
	}
}

// A waiting Lock whose attempts fail with an error that passes on its own
// tries again, with backoff, and takes the lock once Redis answers again;
// a TryLock returns the error, matching ErrUnavailable, with Redis's error
// in its chain, and holds nothing.
func TestLock_RidesOutTransientErrors(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, tc := range transientErrors {
			t.Run(tc.name, func(t *testing.T) {
				ctx := ctxFor(t, time.Minute)
				name := lockName(t)
				rdb := b.newRedis(t)
				faults := &failAttempts{script: scripts.MutexAcquire, err: tc.err}
				rdb.AddHook(faults)
				c := newClient(t, rdb, dlock.WithWaiterRefresh(100*time.Millisecond))
				attempts := countAttempts(c)
				holder := newClient(t, b.newRedis(t))

				faults.left.Store(1)
				_, err := c.Mutex(name).TryLock(ctx)
				if !errors.Is(err, dlock.ErrUnavailable) || !errors.Is(err, tc.err) {
					t.Fatalf("TryLock: %v; want ErrUnavailable wrapping %v", err, tc.err)
				}
				if keys := keysOn(t, ctx, rdb, lockKey(name)); len(keys) != 0 {
					t.Fatalf("a failed TryLock left %v", keys)
				}

				// Uncontended: the first attempts fail.
				faults.left.Store(3)
				lease, err := c.Mutex(name).Lock(ctx)
				if err != nil {
					t.Fatalf("Lock after 3 transient errors: %v", err)
				}
				if err := lease.Unlock(ctx); err != nil {
					t.Fatal(err)
				}

				// Contended: a registered waiter's refreshes fail, then the
				// holder lets go.
				held, err := holder.Mutex(name).Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				registered := attempts.registered.Load()
				result := lockInBackground(ctx, c.Mutex(name).Lock)
				waitDone(t, attempts.registeredReach(registered+1), 30*time.Second, "the waiter's registration")
				failed := faults.failed.Load()
				faults.left.Store(3)
				waitDone(t, faults.failed.reach(failed+3), 30*time.Second, "the waiter's failing attempts")
				if err := held.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				expectAcquired(t, result, 30*time.Second, "the waiter never took the lock")
			})
		}
	})
}

// whileWaiting waits until the waiter's attempts have failed n times,
// failing the test should its Lock return meanwhile.
func whileWaiting(t *testing.T, failed *countdown, n int64, result <-chan error, what string) {
	t.Helper()
	select {
	case <-failed.reach(n):
	case err := <-result:
		t.Fatalf("the waiting Lock returned %s: %v", what, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("the waiter's attempts did not fail %s", what)
	}
}

// While a slot is split between two nodes, a script on its keys gets
// TRYAGAIN: a waiting Lock waits that out and takes the lock once the slot
// has moved and the holder released; a TryLock meanwhile returns
// ErrUnavailable.
func TestLock_WaitsOutASlotMigration(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	ctx := ctxFor(t, 2*time.Minute)
	name := lockName(t)
	waiterRedis := c.Client()
	holder := newClient(t, c.Client())
	waiter := newClient(t, waiterRedis, dlock.WithWaiterRefresh(100*time.Millisecond))
	attempts, failed := countAttempts(waiter), failedAttempts(waiter)
	trier := newClient(t, c.Client())

	held, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	result := lockInBackground(ctx, waiter.Mutex(name).Lock)
	waitDone(t, attempts.registeredReach(1), 30*time.Second, "the waiter's registration")

	slot := int(waiterRedis.ClusterKeySlot(ctx, lockKey(name)).Val())
	from, err := c.SlotOwner(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	err = c.MigrateSlot(ctx, slot, (from+1)%len(c.Nodes), func() {
		whileWaiting(t, failed, 3, result, "while the slot was split")
		_, err := trier.Mutex(name).TryLock(ctx)
		if !errors.Is(err, dlock.ErrUnavailable) || !redis.IsTryAgainError(err) {
			t.Errorf("TryLock while the slot is split: %v; want ErrUnavailable", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	expectAcquired(t, result, 30*time.Second, "the waiter never took the lock after the migration")
}

// A cluster client made before a failover keeps sending to the dead master
// (connection refused) until it reloads the layout: a waiting Lock rides
// that out and takes the lock on the new master; a TryLock meanwhile
// returns ErrUnavailable.
func TestLock_WaitsOutAFailover(t *testing.T) {
	t.Parallel() // waits on its own cluster's failover, not on the CPU
	c := redistest.StartReplicatedCluster(t)
	ctx := ctxFor(t, 2*time.Minute)
	name := lockName(t)
	waiterRedis := c.Client()
	holder := newClient(t, c.Client())
	waiter := newClient(t, waiterRedis, dlock.WithWaiterRefresh(100*time.Millisecond))
	attempts, failed := countAttempts(waiter), failedAttempts(waiter)
	trierRedis := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), MaxRedirects: 1})
	t.Cleanup(func() { _ = trierRedis.Close() })
	trier := newClient(t, trierRedis)
	if err := trierRedis.Ping(ctx).Err(); err != nil { // learns the layout
		t.Fatal(err)
	}

	held, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	result := lockInBackground(ctx, waiter.Mutex(name).Lock)
	waitDone(t, attempts.registeredReach(1), 30*time.Second, "the waiter's registration")

	slot := int(waiterRedis.ClusterKeySlot(ctx, lockKey(name)).Val())
	master, err := c.SlotOwner(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	c.Nodes[master].Kill() // the replica takes over only after the node timeout
	if _, err := trier.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrUnavailable) {
		t.Errorf("TryLock with the master down: %v; want ErrUnavailable", err)
	}
	whileWaiting(t, failed, 1, result, "with the master down")
	if err := c.FailOver(ctx, master); err != nil {
		t.Fatal(err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Logf("the holder's Unlock after the failover: %v (the waiter takes the lock at its expiry)", err)
	}
	expectAcquired(t, result, 60*time.Second, "the waiter never took the lock after the failover")
}

// Every waiting type rides out transient errors the way a Mutex does; a
// FairMutex waiter, whose call keeps one owner token, goes on as a new one
// and is still handed the lock.
func TestLock_EveryTypeRidesOutTransientErrors(t *testing.T) {
	for _, k := range serverKinds() {
		tc := struct {
			script *redis.Script
			lock   taker
		}{k.Scripts.Acquire, lockOn(k, 1, func(name string) []string { return []string{name, name + ":2"} })}
		t.Run(k.Label(), func(t *testing.T) {
			ctx := ctxFor(t, time.Minute)
			name := lockName(t)
			rdb := redis.NewClient(&redis.Options{Addr: sharedStandalone().Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			faults := &failAttempts{script: tc.script, err: replyError("LOADING Redis is loading the dataset in memory")}
			rdb.AddHook(faults)
			c := newClient(t, rdb, dlock.WithWaiterRefresh(100*time.Millisecond))
			holder := newClient(t, backends[0].newRedis(t))

			held, err := tc.lock(holder, name)(ctx)
			if err != nil {
				t.Fatal(err)
			}
			faults.left.Store(3)
			result := lockInBackground(ctx, tc.lock(c, name))
			waitDone(t, faults.failed.reach(3), 30*time.Second, "the waiter's failing attempts")
			if err := held.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			expectAcquired(t, result, 30*time.Second, "the waiter never took the lock")
		})
	}
}

// slowGrantThenReset delays the reply to the first acquire past a third of
// its TTL, so the grant must be confirmed with an extension, and resets the
// connection of that first extension.
type slowGrantThenReset struct {
	mu            sync.Mutex
	slowed, reset bool
}

func (h *slowGrantThenReset) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowGrantThenReset) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		reset := runs(cmd, scripts.MutexExtend) && h.slowed && !h.reset
		h.reset = h.reset || reset
		h.mu.Unlock()
		if reset {
			err := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
			cmd.SetErr(err)
			return err
		}
		err := next(ctx, cmd)
		h.slow(cmd)
		return err
	}
}

func (h *slowGrantThenReset) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.slow(c)
		}
		return err
	}
}

func (h *slowGrantThenReset) slow(cmd redis.Cmder) {
	h.mu.Lock()
	slow := runs(cmd, scripts.MutexAcquire) && !h.slowed
	h.slowed = h.slowed || slow
	h.mu.Unlock()
	if slow {
		time.Sleep(800 * time.Millisecond) // the workload: a reply that comes late
	}
}

// A waiting Lock whose grant came late and whose confirmation met a
// transient error goes on and takes the lock, as after any transient error.
func TestLock_RidesOutATransientErrorConfirmingALateGrant(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: sharedStandalone().Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	hook := &slowGrantThenReset{}
	rdb.AddHook(hook)
	c := newClient(t, rdb, dlock.WithTTL(time.Second))
	ctx := ctxFor(t, 30*time.Second)
	lease, err := c.Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v (slowed %v, reset %v)", err, hook.slowed, hook.reset)
	}
	if !hook.reset {
		t.Fatal("the confirmation was never reset: the test tested nothing")
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
