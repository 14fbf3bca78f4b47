package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/observe"
)

// deadAddr is a loopback address nothing listens on: a server's, started
// and killed.
func deadAddr(t *testing.T) string {
	srv := redistest.Start(t)
	srv.Kill()
	return srv.Addr()
}

// outcomes is an Observer that keeps each acquire call's outcome.
type outcomes struct {
	mu   sync.Mutex
	seen []observe.Outcome
}

func (o *outcomes) observer() *observe.Observer {
	return &observe.Observer{Acquire: func(ctx context.Context, _ observe.AcquireCall) (context.Context, func(observe.AcquireDone)) {
		return ctx, func(d observe.AcquireDone) {
			o.mu.Lock()
			defer o.mu.Unlock()
			o.seen = append(o.seen, d.Outcome)
		}
	}}
}

func (o *outcomes) last() observe.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.seen) == 0 {
		return ""
	}
	return o.seen[len(o.seen)-1]
}

// unreachable fails the test unless err says Redis could not be reached,
// with its cause, and never that the lock was taken.
func unreachable(t *testing.T, what string, err error, cause string) {
	t.Helper()
	if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), cause) {
		t.Errorf("%s: %v; want ErrUnavailable saying %q, not ErrNotAcquired", what, err, cause)
	}
}

// A Client pointed at a port nothing listens on (a mistyped port) is told
// so: its calls fail with ErrUnavailable and "connection refused", a
// waiting Lock too once its context ends, and the Observer is told error.
func TestUnreachable_AClientOnADeadPortSaysConnectionRefused(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: deadAddr(t), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var seen outcomes
	c := newClient(t, rdb, dlock.WithObserver(seen.observer()))
	ctx := ctxFor(t, time.Minute)

	_, err := c.Mutex("m").TryLock(ctx)
	unreachable(t, "TryLock", err, "connection refused")
	if !errors.Is(err, syscall.ECONNREFUSED) || seen.last() != observe.OutcomeError {
		t.Errorf("TryLock: %v, outcome %q; want the refused connection in the chain, outcome error", err, seen.last())
	}

	for what, lock := range map[string]func(context.Context) (*dlock.Lease, error){
		"Mutex":     c.Mutex("m").Lock,
		"FairMutex": c.FairMutex("f").Lock,
		"RLock":     c.RWMutex("rw").RLock,
	} {
		wait, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = lock(wait)
		cancel()
		unreachable(t, what+" with a deadline", err, "connection refused")
		if !errors.Is(err, context.DeadlineExceeded) || seen.last() != observe.OutcomeError {
			t.Errorf("%s: %v, outcome %q; want DeadlineExceeded too, outcome error", what, err, seen.last())
		}
	}
}

// A Redlock acquisition that fails because nodes are down says
// ErrUnavailable, not ErrNotAcquired; one that other owners' holds keep
// out of a majority says ErrNotAcquired, whatever the other nodes did.
func TestUnreachable_ARedlockWithNodesDownSaysUnavailable(t *testing.T) {
	servers := redistest.StartMasters(t, 3)
	ctx := ctxFor(t, time.Minute)
	opts := []dlock.Option{dlock.WithTTL(10 * time.Second), dlock.WithNodeTimeout(100 * time.Millisecond)}
	name := lockName(t)
	for _, srv := range servers[:2] { // another owner holds nodes 0 and 1
		if _, err := newClient(t, srv.Client()).Mutex(name, dlock.WithTTL(time.Minute)).TryLock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var seen outcomes
	rl := redlockOver(t, servers, append(opts, dlock.WithObserver(seen.observer()))...)

	servers[2].Kill()
	_, err := rl.Mutex(name).TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, dlock.ErrUnavailable) || seen.last() != observe.OutcomeNotAcquired {
		t.Errorf("held on 2 of 3, the third down: %v, outcome %q; want ErrNotAcquired, not ErrUnavailable", err, seen.last())
	}

	servers[1].Kill()
	_, err = rl.Mutex(name).TryLock(ctx)
	unreachable(t, "held on 1 of 3, two down", err, "connection refused")

	servers[0].Kill()
	_, err = rl.Mutex(name).TryLock(ctx)
	unreachable(t, "every node down: TryLock", err, "connection refused")
	if seen.last() != observe.OutcomeError {
		t.Errorf("every node down: TryLock's outcome %q; want error", seen.last())
	}
	wait, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = rl.Mutex(name).Lock(wait)
	unreachable(t, "every node down: Lock with a deadline", err, "connection refused")
	if !errors.Is(err, context.DeadlineExceeded) || seen.last() != observe.OutcomeError {
		t.Errorf("every node down: Lock: %v, outcome %q; want DeadlineExceeded too, outcome error", err, seen.last())
	}
}

// A TryLock whose context ends while go-redis still dials a refused port
// (it dials again and again before a command fails) says why:
// ErrUnavailable with "connection refused" and the context's error, never
// ErrNotAcquired; through a Client and a Cluster client alike.
func TestUnreachable_ATryLockCutShortWhileDialingSaysConnectionRefused(t *testing.T) {
	dead := deadAddr(t)
	again := func(int) time.Duration { return 20 * time.Millisecond } // dials outlast the call's context
	for kind, rdb := range map[string]redis.UniversalClient{
		"Client":        redis.NewClient(&redis.Options{Addr: dead, DialerRetries: 1000, DialerRetryBackoff: again}),
		"ClusterClient": redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{dead}, DialerRetries: 1000, DialerRetryBackoff: again}),
	} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // each Close waits out its call's clean-up, sent to the dead port
			t.Cleanup(func() { _ = rdb.Close() })
			var seen outcomes
			c := newClient(t, rdb, dlock.WithObserver(seen.observer()))
			ctx, cancel := context.WithTimeout(ctxFor(t, time.Minute), 300*time.Millisecond)
			_, err := c.Mutex("m").TryLock(ctx)
			cancel()
			unreachable(t, "TryLock with a deadline", err, "connection refused")
			if !errors.Is(err, context.DeadlineExceeded) || seen.last() != observe.OutcomeError {
				t.Errorf("TryLock: %v, outcome %q; want DeadlineExceeded too, outcome error", err, seen.last())
			}
		})
	}
}

// A Ring whose shards are all down ("redis: all ring shards are down") is
// unavailable: TryLock says so at once, a waiting Lock once its context ends.
func TestUnreachable_ARingWithEveryShardDownSaysUnavailable(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": deadAddr(t)}, HeartbeatFrequency: 10 * time.Millisecond})
	t.Cleanup(func() { _ = ring.Close() })
	ctx := ctxFor(t, time.Minute)
	for ring.Ping(ctx).Err() == nil || !strings.Contains(ring.Ping(ctx).Err().Error(), "all ring shards are down") {
		if ctx.Err() != nil {
			t.Fatal("the ring's heartbeat never marked its shard down")
		}
	}
	c := newClient(t, ring)
	_, err := c.Mutex("m").TryLock(ctx)
	unreachable(t, "TryLock", err, "all ring shards are down")
	wait, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = c.Mutex("m").Lock(wait)
	unreachable(t, "Lock with a deadline", err, "all ring shards are down")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock: %v; want DeadlineExceeded too", err)
	}
}
