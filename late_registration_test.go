package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/scripts"
)

// A late copy of a waiter's earlier attempt may land while the waiter still
// waits (held on the network, or resent by go-redis after a read timeout,
// on another connection): before its tombstone, so it registers the call a
// second time, under that earlier attempt, beside its latest registration.
// Every registration of the call goes with it, whichever way it leaves the
// line, or a later release hands the lock to a call that has gone, held
// then for nobody until the registration runs out (the explorer's soak,
// seed 1795718155730350820: a Mutex orphan after a waiter gave up).
func TestLateAttempt_OfAnEarlierRegistrationLeavesWithItsWaiter(t *testing.T) {
	// How the waiter leaves the line: it gives up; it is handed the lock
	// (or woken to take it) by the holder's release, and unlocks; or it
	// takes the lock itself once the holder's lease ran out, and unlocks.
	const (
		gaveUp = iota
		handedOver
		tookIt
	)
	for how, name := range []string{"gives up", "handed the lock, then unlocks", "takes it once the holder's lease ran out, then unlocks"} {
		t.Run(name, func(t *testing.T) {
			forEachLockType(t, func(t *testing.T, b backend, lt lockType) {
				ctx := ctxFor(t, 30*time.Second)
				name := lockName(t)
				other := b.newRedis(t)
				hold := lt.hold
				if hold == nil {
					hold = lt.take
				}
				holders := newClient(t, other, dlock.WithTTL(time.Second))
				holder, err := hold(holders, name)(ctx)
				if err != nil {
					t.Fatal(err)
				}

				rdb := b.newRedis(t)
				copies := &copier{script: lt.acquire}
				rdb.AddHook(copies)
				// A registration lasts three refreshes: the late copy's must
				// outlast the holder's TTL, for the waiter to take the lock
				// with it still there.
				refresh := 100 * time.Millisecond
				if how == tookIt {
					refresh = 500 * time.Millisecond
				}
				waiter := newClient(t, rdb, dlock.WithWaiterRefresh(refresh))
				attempts := countAttemptsOf(waiter, lt.acquire)
				waitCtx, cancel := context.WithCancel(ctx)
				defer cancel()
				type result struct {
					lease *dlock.Lease
					err   error
				}
				results := make(chan result, 1)
				take := lt.take(waiter, name)
				go func() {
					lease, err := take(waitCtx)
					results <- result{lease, err}
				}()
				waitDone(t, attempts.registeredReach(2), 10*time.Second, "the waiter registering twice")
				// The waiter's attempts up to its first registration, again:
				// its latest registration is a later one.
				copies.resendFirst(t, ctx, other, 2)

				switch how {
				case gaveUp:
					cancel()
					if r := <-results; !errors.Is(r.err, context.Canceled) {
						t.Fatalf("cancelled wait: %v", r.err)
					}
					if err := holder.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
					expectNothingLeft(t, ctx, other, name, "after the holder's release, the waiter gone")
					return
				case handedOver:
					if err := holder.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				case tookIt:
					_ = holders.Close() // no renewals: the hold runs out within its TTL
				}
				r := <-results
				if r.err != nil {
					t.Fatalf("waiter, once the holder released: %v", r.err)
				}
				if err := r.lease.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				expectNothingLeft(t, ctx, other, name, "after the waiter's own release")
			})
		})
	}
}

// A late copy of a waiter's first attempt (which registers nothing) may
// take the lock for the call once it is free, while the call is
// registered: the call's next attempt finds the hold its own. Its
// registration goes then too, whether that attempt is granted or the call
// gives up on it, or the lock's release would hand the lock to it (held
// for nobody), or it would keep readers out as a waiting writer does.
func TestLateAttempt_OfAFirstAttemptTakingTheLockLeavesNoRegistration(t *testing.T) {
	for _, gives := range []bool{false, true} {
		what := "granted at its next attempt"
		if gives {
			what = "gives up at its next attempt"
		}
		t.Run(what, func(t *testing.T) {
			forEachLockType(t, func(t *testing.T, b backend, lt lockType) {
				if lt.acquire == scripts.FairAcquire {
					t.Skip("a FairMutex's free lock goes to the head of its queue: the waiter, not a copy of its first attempt")
				}
				ctx := ctxFor(t, 30*time.Second)
				name := lockName(t)
				other := b.newRedis(t)
				hold := lt.hold
				if hold == nil {
					hold = lt.take
				}
				if _, err := hold(newClient(t, other, dlock.WithTTL(time.Hour)), name)(ctx); err != nil {
					t.Fatal(err)
				}

				rdb := b.newRedis(t)
				copies := &copier{script: lt.acquire}
				next := &gate{script: lt.acquire, open: make(chan struct{}), blocked: make(chan struct{}, 1)}
				rdb.AddHook(copies)
				rdb.AddHook(next)
				waiter := newClient(t, rdb, dlock.WithWaiterRefresh(time.Second))
				attempts := countAttemptsOf(waiter, lt.acquire)
				waitCtx, cancel := context.WithCancel(ctx)
				defer cancel()
				type result struct {
					lease *dlock.Lease
					err   error
				}
				results := make(chan result, 1)
				take := lt.take(waiter, name)
				go func() {
					lease, err := take(waitCtx)
					results <- result{lease, err}
				}()
				waitDone(t, attempts.registeredReach(1), 10*time.Second, "the waiter registering")
				next.armed.Store(true)
				waitDone(t, next.blocked, 10*time.Second, "the waiter's next attempt")

				// The holder's hold goes without a release (as by an
				// eviction): nothing wakes the waiter. Its first attempt's
				// copy lands then, and takes the lock.
				for _, key := range keysOn(t, ctx, other, "*{"+name+"*") {
					if strings.HasSuffix(key, ":waiters") || strings.HasSuffix(key, ":rwaiters") || strings.HasSuffix(key, ":queue") {
						continue
					}
					if err := other.Del(ctx, key).Err(); err != nil {
						t.Fatal(err)
					}
				}
				res, err := scripts.AcquireReply(other.Do(ctx, copies.sent()[0]...))
				if err != nil || res[0] != 1 {
					t.Fatalf("the late copy on a free lock: %v, %v; want granted", res, err)
				}
				if gives {
					cancel()
				}
				close(next.open)
				r := <-results
				if gives {
					if !errors.Is(r.err, context.Canceled) {
						t.Fatalf("cancelled wait: %v", r.err)
					}
					expectNothingLeft(t, ctx, other, name, "after the waiter gave up")
					return
				}
				if r.err != nil {
					t.Fatalf("the waiter's next attempt: %v", r.err)
				}
				expectNoneWaiting(t, ctx, other, name, "once the waiter holds the lock")
				if err := r.lease.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				expectNothingLeft(t, ctx, other, name, "after the waiter's release")
			})
		})
	}
}

// A copy of a waiter's earlier registering attempt that lands late with
// no read timeout on the client (held by a proxy in front of Redis, which
// kept it when the client's connection to the proxy broke and go-redis
// resent at once): the call saw no sign of a copy, yet the hand-over to
// its latest registration must withdraw the copy's, or the call's own
// release hands the lock to it, held then for a call that has gone.
func TestLateAttempt_LandingWithoutAReadTimeoutIsWithdrawnByTheHandOver(t *testing.T) {
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
	if res, err := scripts.AcquireReply(other.Do(ctx, sent[1]...)); err != nil || res[0] != 0 {
		t.Fatalf("the late copy: %v, %v; want refused", res, err)
	}
	if err := holder.Unlock(ctx); err != nil { // hands the lock to the latest registration
		t.Fatal(err)
	}
	expectAcquired(t, got, 10*time.Second, "the waiter was never handed the lock")
	expectNothingLeft(t, ctx, other, name, "after the waiter's own release")
}
