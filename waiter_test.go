package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/family"
	"github.com/dlockio/dlock/internal/scripts"
)

// A waiter's registration lasts three refreshes: a refresh so long that
// this overflows, or that Redis cannot take as an expiry, is refused
// before anything is sent.
func TestWaiterRefresh_AboveTheMaximumIsRefusedBeforeAnyCommand(t *testing.T) {
	counter := &commandCounter{}
	rdb := backends[0].newRedis(t)
	rdb.AddHook(counter)
	ctx := ctxFor(t, 10*time.Second)
	for _, refresh := range []time.Duration{dlock.MaxWaiterRefresh + time.Millisecond, 1 << 62, math.MaxInt64 / 2, math.MaxInt64} {
		c := newClient(t, rdb)
		name := lockName(t) // fresh: before the bound, these locks were taken
		opt := dlock.WithWaiterRefresh(refresh)
		locks := map[string]func() error{
			"New": func() error { _, err := dlock.New(rdb, opt); return err },
		}
		for _, k := range serverKinds() {
			for _, try := range []bool{true, false} {
				locks[fmt.Sprintf("%s (try %v)", k.Label(), try)] = func() error {
					_, err := k.Take(ctx, family.Target{Client: c, Permits: 1}, namesOf(k, name), try, opt)
					return err
				}
			}
		}
		for what, lock := range locks {
			if err := lock(); !errors.Is(err, dlock.ErrInvalid) {
				t.Errorf("%s with a waiter refresh of %v: %v; want ErrInvalid", what, refresh, err)
			}
		}
	}
	if n := counter.commands.Load(); n != 0 {
		t.Fatalf("%d commands sent for invalid arguments, want 0", n)
	}
}

// Waiters in different processes may refresh at different rates: one that
// registers with a short refresh must not cut the line's expiry below the
// registration of one with a long refresh, or the line expires with that
// waiter in it and a later comer overtakes it.
func TestFairMutex_ShortRefreshDoesNotShortenALongerRegistration(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		rdb := b.newRedis(t)
		name := lockName(t)
		holder, err := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute)).FairMutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		const longRefresh = time.Hour
		longWaiter := newClient(t, b.newRedis(t), dlock.WithWaiterRefresh(longRefresh))
		longQueued := countAttemptsOf(longWaiter, scripts.FairAcquire).registeredReach(1)
		long := lockInBackground(ctx, longWaiter.FairMutex(name).Lock)
		waitDone(t, longQueued, 30*time.Second, "the long-refresh waiter queuing")

		shortWaiter := newClient(t, b.newRedis(t), dlock.WithWaiterRefresh(dlock.MinWaiterRefresh))
		shortQueued := countAttemptsOf(shortWaiter, scripts.FairAcquire).registeredReach(1)
		shortCtx, cancelShort := context.WithCancel(ctx)
		short := lockInBackground(shortCtx, shortWaiter.FairMutex(name).Lock)
		waitDone(t, shortQueued, 30*time.Second, "the short-refresh waiter queuing")

		// The long waiter registered for three hours, less than a minute ago.
		for _, key := range []string{lockKey(name) + ":queue", lockKey(name) + ":waiters"} {
			if ttl := rdb.PTTL(ctx, key).Val(); ttl < 3*longRefresh-time.Minute {
				t.Errorf("TTL of %q: %v; want at least the long waiter's registration (about %v)", key, ttl, 3*longRefresh)
			}
		}
		cancelShort()
		if err := <-short; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Lock: %v", err)
		}
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		expectAcquired(t, long, 30*time.Second, "the long-refresh waiter was not handed the lock")
	})
}

// severed is a go-redis hook that, once cut, fails every command without
// sending it: to Redis, the process is gone.
type severed struct{ cut atomic.Bool }

var errSevered = errors.New("severed from Redis")

func (h *severed) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *severed) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.cut.Load() {
			cmd.SetErr(errSevered)
			return errSevered
		}
		return next(ctx, cmd)
	}
}

func (h *severed) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.cut.Load() {
			for _, cmd := range cmds {
				cmd.SetErr(errSevered)
			}
			return errSevered
		}
		return next(ctx, cmds)
	}
}

// Under constant contention an RWMutex's sets of waiters never expire: the
// registrations of waiters that died must still go once their lease has
// run out, or the sets grow without bound.
func TestRWMutex_DeadWaitersLeaveTheirSetUnderContention(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, mode := range []struct {
			what string
			set  string // the waiters' set, after the lock key
			lock func(*dlock.RWMutex) func(context.Context) (*dlock.Lease, error)
		}{
			{"writer", ":waiters", func(rw *dlock.RWMutex) func(context.Context) (*dlock.Lease, error) { return rw.Lock }},
			{"reader", ":rwaiters", func(rw *dlock.RWMutex) func(context.Context) (*dlock.Lease, error) { return rw.RLock }},
		} {
			ctx := ctxFor(t, time.Minute)
			rdb := b.newRedis(t)
			name := lockName(t)
			set := lockKey(name) + mode.set
			holder, err := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute)).RWMutex(name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}

			// Another waiter of the same kind keeps registering, every
			// second for three, and so the set alive.
			liveWaiter := newClient(t, b.newRedis(t), dlock.WithWaiterRefresh(time.Second))
			liveRegistered := countAttemptsOf(liveWaiter, scripts.RWAcquire).registeredReach(1)
			liveCtx, stopLive := context.WithCancel(ctx)
			live := lockInBackground(liveCtx, mode.lock(liveWaiter.RWMutex(name)))
			waitDone(t, liveRegistered, 30*time.Second, "the live "+mode.what+" registering")

			// A waiter registers for 30 ms, and at once its process is cut
			// off from Redis: its registration is neither renewed nor
			// withdrawn.
			deadRedis := b.newRedis(t)
			cut := &severed{}
			var deadMember atomic.Value
			registered := make(chan struct{})
			deadRedis.AddHook(cut)
			deadClient := newClient(t, deadRedis, dlock.WithWaiterRefresh(dlock.MinWaiterRefresh))
			dlock.OnAttempt(deadClient, func(r dlock.AttemptReport) {
				refused := r.Err == nil && len(r.Reply) > 0 && r.Reply[0] == 0
				if r.Script == scripts.RWAcquire && refused && r.Entry != "" && !cut.cut.Swap(true) {
					deadMember.Store(r.Entry)
					close(registered)
				}
			})
			dead := deadClient.RWMutex(name)
			deadResult := lockInBackground(ctx, mode.lock(dead))
			waitDone(t, registered, 30*time.Second, "the "+mode.what+" that dies registering")
			if err := <-deadResult; !errors.Is(err, errSevered) {
				t.Fatalf("%s: Lock of the severed waiter: %v", mode.what, err)
			}
			member := deadMember.Load().(string)
			eventually(t, ctxFor(t, 20*time.Second), mode.what+": the dead registration leaving", func() bool {
				return rdb.ZScore(ctx, set, member).Err() == redis.Nil
			})
			if n := rdb.ZCard(ctx, set).Val(); n != 1 {
				t.Errorf("%s: %d registrations; want the live waiter's alone", mode.what, n)
			}
			stopLive()
			if err := <-live; !errors.Is(err, context.Canceled) {
				t.Fatalf("%s: cancelled Lock: %v", mode.what, err)
			}
			if err := holder.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}
