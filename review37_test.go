package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/scripts"
)

// A Lock whose first registration lands behind a waiter that died (its
// process frozen right after it registered) is told no hold TTL (-3), and
// nobody alive waits ahead of it to retry as the hold runs out. When the
// holder dies too, the lock is free once its TTL ran out; the live waiter
// must take it then, not a waiter refresh later (here a minute).
func TestReview37_AWaiterBehindADeadWaiterTakesTheLockAsTheHoldRunsOut(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	b := backends[0]
	name := lockName(t)
	rdb := b.newRedis(t)
	holders := newClient(t, b.newRedis(t), dlock.WithTTL(500*time.Millisecond))
	if _, err := holders.Mutex(name).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	// The dead waiter's registration: a real one, captured, then left
	// behind as a frozen process leaves it.
	refresh := dlock.WithWaiterRefresh(time.Minute)
	dead := newClient(t, b.newRedis(t), refresh)
	entries := make(chan string, 8)
	dlock.OnAttempt(dead, func(r dlock.AttemptReport) {
		if r.Script == scripts.MutexAcquire && r.Err == nil && r.Entry != "" && r.Reply[0] == 0 {
			entries <- r.Entry
		}
	})
	deadCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := dead.Mutex(name).Lock(deadCtx); done <- err }()
	var entry string
	select {
	case entry = <-entries:
	case <-ctx.Done():
		t.Fatal("the dead waiter never registered")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("dead waiter: %v", err)
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	waiters := lockKey(name) + ":waiters"
	score := float64(now.UnixMicro())/1000 + float64((3 * time.Minute).Milliseconds())
	if err := rdb.ZAdd(ctx, waiters, redis.Z{Score: score, Member: entry}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.PExpire(ctx, waiters, 6*time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	behind := newClient(t, b.newRedis(t), refresh)
	registered := countAttempts(behind).registeredReach(1)
	got := make(chan error, 1)
	go func() {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := behind.Mutex(name).Lock(lctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitDone(t, registered, 10*time.Second, "the live waiter registering")
	_ = holders.Close() // no renewals, no release: the hold runs out within 500ms
	if err := <-got; err != nil {
		t.Fatalf("the live waiter, 10s after a 500ms hold of a dead holder: %v", err)
	}
}
