package dlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
)

// A graceful cluster failover drops a waiter's sharded subscription, and
// its registration lives on, copied to the new master: a release there
// hands the lock to it, and the word is lost. The waiter, woken by the
// drop, leaves the line and watches anew, giving the hold back: until
// then its call held the lock for no lease, and a TryLock was refused
// with no lease held. Its Observer hears of it, as of any grant given
// back (a WaitRetry with an error), so that a history of the locks (the
// explorer's) can count that hold (the explorer's soak, seed
// 1795742894877401398: a TryLock refused "while nothing was held").
func TestWaiter_HandOverLostInAFailoverIsReportedGivenBack(t *testing.T) {
	t.Parallel() // waits on its own clusters' failovers, not on the CPU
	const readTimeout = 500 * time.Millisecond
	for _, leave := range []struct {
		name string
		// hook, on the waiter's client (with readTimeout), does to the
		// leave's abandon what the case says; nil for nothing.
		hook func(other redis.UniversalClient) redis.Hook
		// cause is what the report must also match: why the give-back
		// failed, if it did.
		cause error
	}{
		{name: "its leave answered"},
		// A copy of the leave, sent by go-redis after a read timeout, may
		// have given the hold back first: the reply read, the other
		// copy's, finds nothing to give back.
		{name: "its leave sent twice, the copy first", hook: func(other redis.UniversalClient) redis.Hook {
			return &copyFirst{script: scripts.MutexAbandon, other: other, after: readTimeout}
		}},
		// The leave's reply is lost: the report says why.
		{name: "its leave's reply lost", cause: errReplyLost, hook: func(redis.UniversalClient) redis.Hook {
			return &copier{script: scripts.MutexAbandon, loseFirst: true}
		}},
	} {
		t.Run(leave.name, func(t *testing.T) {
			t.Parallel()
			c := redistest.StartReplicatedCluster(t)
			rdb := c.Client()
			waiterRedis := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ReadTimeout: readTimeout})
			t.Cleanup(func() { _ = waiterRedis.Close() })
			if leave.hook != nil {
				waiterRedis.AddHook(leave.hook(rdb))
			}
			handOverLostInAFailover(t, c, rdb, waiterRedis, leave.cause)
		})
	}
}

func handOverLostInAFailover(t *testing.T, c *redistest.Cluster, rdb, waiterRedis redis.UniversalClient, cause error) {
	ctx := ctxFor(t, time.Minute)
	name := lockName(t)

	registered := make(chan struct{}, 1)
	woken := make(chan struct{}, 1)
	goOn := make(chan struct{})
	givenBack := make(chan error, 8)
	obs := &observe.Observer{Wait: func(_ context.Context, ev observe.WaitEvent) {
		switch {
		case ev.Step == observe.WaitRegistered:
			registered <- struct{}{}
		case ev.Step == observe.WaitRetry && ev.Err == nil:
			// The failover's wake-up: the waiter stays here until the
			// holder has released, handing it the lock.
			select {
			case woken <- struct{}{}:
				<-goOn
			default:
			}
		case ev.Step == observe.WaitRetry:
			givenBack <- ev.Err
		}
	}}
	// The waiter stays in its Observer until the test lets it go, or ends.
	letGo := sync.OnceFunc(func() { close(goOn) })
	t.Cleanup(letGo)
	// No waiter refresh or hold expiry comes in the test's time: the
	// failover is what wakes the waiter.
	const long = 30 * time.Second
	waiter := newClient(t, waiterRedis, dlock.WithObserver(obs), dlock.WithWaiterRefresh(long/3))
	holder, err := newClient(t, c.Client()).Mutex(name, dlock.WithTTL(long)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lease *dlock.Lease
		err   error
	}
	done := make(chan result, 1)
	go func() {
		l, err := waiter.Mutex(name, dlock.WithTTL(long)).Lock(ctx)
		done <- result{l, err}
	}()
	waitDone(t, registered, 10*time.Second, "the waiter registering")

	master, err := c.SlotOwner(ctx, dlock.ClusterSlot(name))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ManualFailOver(ctx, master, ""); err != nil {
		t.Fatal(err)
	}
	waitDone(t, woken, 10*time.Second, "the waiter woken by the failover")
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, rdb).Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock after the release handed the lock to the waiter: %v, want ErrNotAcquired", err)
	}
	letGo()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-givenBack:
		if cause != nil && !errors.Is(err, cause) {
			t.Fatalf("reported %v: want it to say why the give-back failed, %v", err, cause)
		}
	default:
		t.Fatal("the waiter gave back a lock handed to it, and its Observer heard of no grant given back")
	}
}

// copyFirst is a go-redis hook that, the first time script runs, sends a
// copy of the command on other first, and the command itself after, as
// late as a read timeout (after): as go-redis's resend after a read
// timeout looks from Redis, the copy applied first.
type copyFirst struct {
	script *redis.Script
	other  redis.UniversalClient
	after  time.Duration
	done   atomic.Bool
}

func (h *copyFirst) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *copyFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if runs(cmd, h.script) && h.done.CompareAndSwap(false, true) {
			// The new master may not know the script yet.
			if err := h.script.Load(ctx, h.other).Err(); err != nil {
				return err
			}
			if err := h.other.Do(ctx, cmd.Args()...).Err(); err != nil {
				return err
			}
			time.Sleep(h.after)
		}
		return next(ctx, cmd)
	}
}

func (h *copyFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
