package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
)

// A release hands a Mutex to a waiting Lock inside the release script (see
// hand_next.lua): these tests cover what the waiter makes of it.

// handOver has a holder in one client release the lock (a Mutex, or with
// fair a FairMutex) to a Lock waiting in another, made with opts, and
// returns the waiter's lease and how many of its attempts were granted (a
// hand-over needs none).
func handOver(t *testing.T, b backend, fair bool, opts ...dlock.Option) (*dlock.Lease, int64) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	name := lockName(t)
	holders, rdb := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute)), b.newRedis(t)
	waiters := newClient(t, rdb, opts...)
	hold, wait, acquire := holders.Mutex(name).Lock, waiters.Mutex(name).Lock, scripts.MutexAcquire
	if fair {
		hold, wait, acquire = holders.FairMutex(name).Lock, waiters.FairMutex(name).Lock, scripts.FairAcquire
	}
	holder, err := hold(ctx)
	if err != nil {
		t.Fatal(err)
	}
	attempts := countAttemptsOf(waiters, acquire)
	leases := make(chan *dlock.Lease, 1)
	errs := make(chan error, 1)
	go func() {
		lease, err := wait(ctx)
		leases <- lease
		errs <- err
	}()
	waitDone(t, attempts.registeredReach(1), 10*time.Second, "the waiter registering")
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lease := <-leases
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lease.Unlock(ctx) })
	return lease, attempts.acquired.Load()
}

// The hand-over holds the lock for what the waiter's registration had left
// (here at most 1.5 s), so a waiter that died costs no more; the lease
// counts on no more than that, and its first renewal, a third of the way
// in, takes it to its TTL.
func TestMutex_HandedOverLeaseRenewsPastItsShortGrant(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "Mutex", true: "FairMutex"}[fair], func(t *testing.T) {
			testHandedOverLeaseRenews(t, fair)
		})
	}
}

func testHandedOverLeaseRenews(t *testing.T, fair bool) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const refresh = 500 * time.Millisecond // registrations last 1.5 s: a renewal a third of the way in has 1 s to spare
		lease, granted := handOver(t, b, fair, dlock.WithTTL(time.Minute), dlock.WithWaiterRefresh(refresh))
		if granted != 0 {
			t.Fatalf("%d attempts granted; want the lock handed over without one", granted)
		}
		first := lease.Deadline()
		if left := time.Until(first); left > 3*refresh {
			t.Fatalf("a hand-over's lease counts on %v; want no more than the 1.5 s registered", left)
		}
		ctx := ctxFor(t, 10*time.Second)
		eventually(t, ctx, "the first renewal", func() bool { return lease.Deadline().After(first.Add(time.Second)) })
		if ttl, err := lease.TTL(ctx); err != nil || ttl < 30*time.Second {
			t.Fatalf("after the first renewal the lock has %v (%v) left; want the 1 min TTL", ttl, err)
		}
	})
}

// A lease of fixed length is never renewed, so a hand-over shorter than it
// is extended before Lock returns.
func TestMutex_HandedOverFixedLeaseIsExtendedToItsLength(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, fair := range []bool{false, true} {
			lease, _ := handOver(t, b, fair, dlock.WithLeaseTime(time.Minute), dlock.WithWaiterRefresh(100*time.Millisecond))
			if left := time.Until(lease.Deadline()); left < 30*time.Second {
				t.Fatalf("fair %v: a fixed lease of 1 min handed over counts on %v", fair, left)
			}
			if ttl, err := lease.TTL(ctxFor(t, 5*time.Second)); err != nil || ttl < 30*time.Second {
				t.Fatalf("fair %v: the lock has %v (%v) left; want the 1 min lease time", fair, ttl, err)
			}
		}
	})
}

// A release tells only the client of the waiter it hands the lock to: each
// client's Mutex waiters listen on a channel of their own, and none on the
// lock's shared one, which every release would reach.
func TestMutex_WaitersOfEachClientListenOnTheirOwnChannel(t *testing.T) {
	srv := startServer(t)
	admin := srv.Client()
	ctx := ctxFor(t, 30*time.Second)
	name := lockName(t)
	holder, err := newClient(t, srv.Client(), dlock.WithTTL(time.Minute)).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var results []<-chan error
	for range 2 {
		waiter := newClient(t, srv.Client())
		attempts := countAttempts(waiter)
		results = append(results, lockInBackground(ctx, waiter.Mutex(name).Lock))
		waitDone(t, attempts.registeredReach(1), 10*time.Second, "a waiter registering")
	}
	_, _, channel := dlock.KeysOf(dlock.DefaultPrefix, name)
	if n := admin.PubSubNumSub(ctx, channel).Val()[channel]; n != 0 {
		t.Fatalf("%d subscribers on the lock's shared channel; want none", n)
	}
	if own := admin.PubSubChannels(ctx, channel+":*").Val(); len(own) != 2 {
		t.Fatalf("channels %q; want one per waiting client", own)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, acquired := range results {
		expectAcquired(t, acquired, 15*time.Second, "a waiter never got the lock")
	}
}

// WithReplicaAck: a hold is returned only once a replica has it. A
// hand-over is made by the release, which waits for no replica, so the
// waiter confirms it with an attempt of its own, which does; here the
// replica is cut off and the hand-over is refused.
func TestMutex_HandOverUnderReplicaAckWaitsForTheReplica(t *testing.T) {
	t.Parallel() // waits on servers and timers of its own, not on the CPU
	f := redistest.StartFailover(t)
	ctx := ctxFor(t, time.Minute)
	name := lockName(t)
	holder, err := newClient(t, f.Client(), dlock.WithTTL(time.Minute)).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	acked := newClient(t, f.Client(), dlock.WithReplicaAck(1, 300*time.Millisecond))
	attempts := countAttempts(acked)
	waiter := acked.Mutex(name)
	result := make(chan error, 1)
	go func() {
		lease, err := waiter.Lock(ctx)
		if err == nil {
			_ = lease.Unlock(ctx)
		}
		result <- err
	}()
	waitDone(t, attempts.registeredReach(1), 10*time.Second, "the waiter registering")
	f.Replica.Pause()
	t.Cleanup(f.Replica.Resume)
	if err := f.Master.Client().ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-result; !errors.Is(err, dlock.ErrReplicaAck) {
		t.Fatalf("the waiter handed the lock with its replica cut off: %v; want ErrReplicaAck", err)
	}
	if n := f.Master.Client().Exists(ctx, lockKey(name)).Val(); n != 0 {
		t.Fatal("the unacknowledged hand-over was not given back")
	}
}

// A FairMutex's hand-over is for the Lock's latest attempt when its token is
// above the fencing counter that attempt read.
func TestFairMutex_StaleOrGarbledHandOverIsIgnored(t *testing.T) {
	c := newClient(t, startServer(t).Client())
	f := c.FairMutex(lockName(t))
	for grant, want := range map[string]bool{
		"8:2000": true,
		"7:2000": false, // minted before the attempt read 7
		"6:2000": false,
		"8:0":    false,
		"x:2000": false,
		"8":      false,
		"":       false,
	} {
		if got := dlock.FairHandOverTaken(f, 7, grant); got != want {
			t.Errorf("hand-over %q to a Lock whose latest attempt read the counter at 7: taken %v, want %v", grant, got, want)
		}
	}
}

// A hand-over is for one attempt of a waiting Lock: the word of one for an
// earlier attempt arrives late (that hold ran out before the latest attempt
// found the lock not ours) and is ignored, as is anything unreadable.
func TestMutex_StaleOrGarbledHandOverIsIgnored(t *testing.T) {
	c := newClient(t, startServer(t).Client())
	m := c.Mutex(lockName(t))
	for grant, want := range map[string]bool{
		"3:7:2000":   true,
		"2:7:2000":   false, // the attempt before the latest
		"3:7:0":      false,
		"3:x:2000":   false,
		"3:7":        false,
		"":           false,
		"3:7:2000:9": false,
	} {
		if got := dlock.HandOverTaken(m, 3, grant); got != want {
			t.Errorf("hand-over %q to a Lock whose latest attempt is the 3rd: taken %v, want %v", grant, got, want)
		}
	}
}

// A Lock's first registration behind another waiter reads no hold TTL
// (-3): it waits for a hand-over, or its refresh. So when the holder
// dies, the waiter ahead, told the TTL, takes the lock as the hold runs
// out, and its release hands the lock on: the one behind waits for
// nothing else, here not for its refresh, a minute away.
func TestMutex_AWaiterBehindAnotherIsHandedTheLockAfterTheHolderDied(t *testing.T) {
	ctx := ctxFor(t, 20*time.Second)
	b := backends[0]
	name := lockName(t)
	holders := newClient(t, b.newRedis(t), dlock.WithTTL(500*time.Millisecond))
	if _, err := holders.Mutex(name).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	refresh := dlock.WithWaiterRefresh(time.Minute)
	ahead, behind := newClient(t, b.newRedis(t), refresh), newClient(t, b.newRedis(t), refresh)
	aheadRegistered := countAttempts(ahead).registeredReach(1)
	told := make(chan int64, 8) // the time left each registration of the one behind read
	dlock.OnAttempt(behind, func(r dlock.AttemptReport) {
		if r.Script == scripts.MutexAcquire && r.Err == nil && r.Entry != "" && r.Reply[0] == 0 {
			told <- r.Reply[1]
		}
	})
	lock := func(c *dlock.Client) <-chan *dlock.Lease {
		lease := make(chan *dlock.Lease, 1)
		go func() {
			l, err := c.Mutex(name).Lock(ctx)
			if err != nil {
				t.Error(err)
			}
			lease <- l
		}()
		return lease
	}
	aheadLease := lock(ahead)
	waitDone(t, aheadRegistered, 10*time.Second, "the first waiter registering")
	behindLease := lock(behind)
	select {
	case left := <-told:
		if left != -3 {
			t.Fatalf("the waiter behind another was told %d ms left; want -3 (not read)", left)
		}
	case <-ctx.Done():
		t.Fatal("the waiter behind another never registered")
	}
	_ = holders.Close() // no renewals: the hold runs out within its TTL
	for _, lease := range []<-chan *dlock.Lease{aheadLease, behindLease} {
		l := <-lease
		if l == nil {
			t.FailNow()
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A Lock whose first registration lands behind a waiter that died (its
// process frozen right after it registered) is told no hold TTL (-3), and
// nobody alive waits ahead of it to retry as the hold runs out. When the
// holder dies too, the lock is free once its TTL ran out; the live waiter,
// asking the holder's TTL, tries again after it, not a waiter refresh
// later (here a minute).
func TestMutex_AWaiterBehindADeadWaiterTakesTheLockAsTheHoldRunsOut(t *testing.T) {
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

	behind := newClient(t, b.newRedis(t), refresh, dlock.WithTTL(500*time.Millisecond))
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
