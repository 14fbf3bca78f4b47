package dlock_test

import (
	"context"
	"errors"
	"strings"
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

// A copy of a waiter's earlier registering attempt that lands late with
// no read timeout on the client (held by a proxy in front of Redis, which
// kept it when the client's connection to the proxy broke and go-redis
// resent at once): the call's attempt numbers carry no leading 0, so the
// hand-over to its latest registration leaves the copy's, and the call's
// own release hands the lock to it, held then for a call that has gone.
func TestReview37_ACopyLandingLateWithoutAReadTimeoutIsWithdrawnByTheHandOver(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	b := backends[0]
	name := lockName(t)
	other := b.newRedis(t)
	holders := newClient(t, other, dlock.WithTTL(time.Minute))
	holder, err := holders.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rdb := b.newRedis(t)
	copies := &copier{script: scripts.MutexAcquire}
	rdb.AddHook(copies)
	waiter := newClient(t, rdb, dlock.WithWaiterRefresh(time.Minute))
	entries := make(chan string, 8)
	dlock.OnAttempt(waiter, func(r dlock.AttemptReport) {
		if r.Script == scripts.MutexAcquire && r.Err == nil && r.Entry != "" && r.Reply[0] == 0 {
			entries <- r.Entry
		}
	})
	got := lockInBackground(ctx, waiter.Mutex(name).Lock)
	first := <-entries
	// A word the waiter takes as "try again": it registers anew at once.
	client, rest, _ := strings.Cut(first, "/")
	id, _, _ := strings.Cut(rest, ":")
	_, _, channel := dlock.KeysOf(dlock.DefaultPrefix, name)
	if err := other.Publish(ctx, channel+":"+client, id).Err(); err != nil {
		t.Fatal(err)
	}
	if second := <-entries; second == first {
		t.Fatal("the waiter did not register anew")
	}
	// The copy of the first registering attempt (the waiter's second
	// attempt) lands now, behind the latest registration.
	sent := copies.sent()
	if res, err := other.Do(ctx, sent[1]...).Int64Slice(); err != nil || res[0] != 0 {
		t.Fatalf("the late copy: %v, %v; want refused", res, err)
	}
	if err := holder.Unlock(ctx); err != nil { // hands the lock to the latest registration
		t.Fatal(err)
	}
	expectAcquired(t, got, 10*time.Second, "the waiter was never handed the lock")
	expectNothingLeft(t, ctx, other, name, "after the waiter's own release")
}
