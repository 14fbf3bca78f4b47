package dlock_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/clock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
)

// expectKeptAfterShorterExtend extends a lease taken with a long TTL to a
// short one: the renewals follow the short TTL, and the lease is kept for
// many of them.
func expectKeptAfterShorterExtend(t *testing.T, ctx context.Context, lease *dlock.Lease) {
	t.Helper()
	const short = time.Second // renewed every 333 ms: a loaded machine has 660 ms to spare
	if err := lease.Extend(ctx, short); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
		t.Fatalf("lease lost after Extend(%v) to a shorter TTL: %v", short, lease.Err())
	case <-time.After(4 * short): // the property: still held after 4 of the new TTLs
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after Extend(%v): %v", short, err)
	}
}

func TestLease_ExtendToAShorterTTLIsRenewedAtTheShorterTTL(t *testing.T) {
	ctx := ctxFor(t, 60*time.Second)
	c := newClient(t, backends[0].newRedis(t), dlock.WithTTL(9*time.Second))
	// The subtests wait on timers, not the CPU: run together.
	t.Run("Mutex", func(t *testing.T) {
		t.Parallel()
		lease, err := c.Mutex(lockName(t)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		expectKeptAfterShorterExtend(t, ctx, lease)
	})
	t.Run("RWMutex", func(t *testing.T) {
		t.Parallel()
		lease, err := c.RWMutex(lockName(t)).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		expectKeptAfterShorterExtend(t, ctx, lease)
	})
	t.Run("Redlock", func(t *testing.T) {
		t.Parallel()
		r := redlockOver(t, redistest.StartMasters(t, 3), dlock.WithTTL(9*time.Second))
		lease, err := r.Mutex(lockName(t)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		expectKeptAfterShorterExtend(t, ctx, lease)
	})
}

// Go's monotonic clock stands still while the machine is suspended; the
// wall clock does not. A lease whose deadline has passed by the wall clock
// is lost, whatever the monotonic clock says: Redis expired its key.
func TestLease_WallClockPastTheDeadlineLosesTheLease(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	c := newClient(t, backends[0].newRedis(t), dlock.WithTTL(time.Minute))
	clk := dlock.UseClock(c)
	lease, err := c.Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Err(); err != nil {
		t.Fatal(err)
	}
	clk.Jump(2 * time.Minute) // resumed after a two-minute suspension
	if err := lease.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Err with the wall clock past the deadline: %v, want ErrLeaseLost", err)
	}
	if err := lease.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend with the wall clock past the deadline: %v, want ErrNotHeld", err)
	}
	if left := clk.Until(lease.Deadline()); left > 0 {
		t.Fatalf("Deadline %v ahead with the wall clock past it", left)
	}
	waitDone(t, lease.Done(), lossGuard, "Done with the wall clock past the deadline")
	if cause := context.Cause(lease.Context(ctx)); !errors.Is(cause, dlock.ErrLeaseLost) {
		t.Fatalf("Context's cause with the wall clock past the deadline: %v, want ErrLeaseLost", cause)
	}
}

// The same, found by the renewer: Done closes at the next renewal, although
// the monotonic deadline timer has a minute to go.
func TestLease_RenewalFindsTheWallClockPastTheDeadline(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	c := newClient(t, backends[0].newRedis(t), dlock.WithTTL(time.Second))
	clk := dlock.UseClock(c)
	lease, err := c.Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := lease.Done()
	clk.Jump(2 * time.Minute)
	waitDone(t, done, lossGuard, "Done with the wall clock past the deadline")
	if err := lease.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Err: %v, want ErrLeaseLost", err)
	}
}

// A process suspended past its lease's TTL (internal/clock: its readings
// stand still, its timers and renewer wait, and once it resumes its
// monotonic clock lags by the suspension while its wall clock does not)
// finds the lease lost the moment it resumes: Redis expired the key
// meanwhile, though by the monotonic clock the deadline is still ahead
// and no renewal is due yet.
func TestLease_ResumedPastItsTTLTheLeaseIsLostAtOnce(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	c := newClient(t, backends[0].newRedis(t), dlock.WithTTL(300*time.Millisecond))
	clk := dlock.UseClock(c)
	lease, err := c.Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clk.Suspend()
	time.Sleep(400 * time.Millisecond) // the workload: a suspension past the TTL
	clk.Resume()
	if err := lease.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Err at the resume: %v, want ErrLeaseLost", err)
	}
	if left := clk.Until(lease.Deadline()); left > 0 {
		t.Fatalf("Deadline %v ahead at the resume", left)
	}
	waitDone(t, lease.Done(), lossGuard, "Done at the resume")
}

// A grant whose reply the process reads only once its machine resumed
// from a suspension (the attempt was sent before it) may have little time
// left by the wall clock, though most by the monotonic one, which stood
// still: it is confirmed by an extension before it is returned, as a
// grant that arrives late is, never returned lost. (One read past its
// deadline is no grant: see
// TestLateAttempt_RetakingAGrantReadAfterASuspensionIsNoConfirmation.)
func TestLease_GrantReadAfterASuspensionIsConfirmedNotReturnedLost(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	c := newClient(t, backends[0].newRedis(t), dlock.WithTTL(time.Minute))
	clk := dlock.UseClock(c)
	var resumed atomic.Bool
	dlock.OnAttempt(c, func(r dlock.AttemptReport) {
		if len(r.Reply) > 0 && r.Reply[0] == 1 && !resumed.Swap(true) {
			clk.Jump(50 * time.Second) // the reply is read after a 50-second suspension
		}
	})
	lease, err := c.Mutex(lockName(t)).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !resumed.Load() {
		t.Fatal("the grant's reply was not seen")
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("TryLock returned a lease already lost: %v", err)
	}
	if left := clk.Until(lease.Deadline()); left < 30*time.Second {
		t.Fatalf("lease returned with %v left of a minute's TTL", left)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A release that hands the lock to a waiter whose process is suspended
// (hand_next.lua) publishes to it at once, while the process reads it
// only once it resumes, as its code runs only then: by then Redis has
// expired the hold, which lasted the waiter's TTL (a suspension past it),
// and another took the lock. The waiter must not return the handed-over
// lease, lost, with a token below the new holder's: it confirms the grant,
// finds it gone, and waits on, for the next release.
func TestMutex_HandOverHeardWhileSuspendedIsActedOnOnceResumed(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "Mutex", true: "FairMutex"}[fair], func(t *testing.T) {
			testHandOverHeardWhileSuspended(t, fair)
		})
	}
}

func testHandOverHeardWhileSuspended(t *testing.T, fair bool) {
	ctx := ctxFor(t, 30*time.Second)
	name := lockName(t)
	// The waiter hears of the lock from the hand-over, before its first
	// refresh. A Mutex's hand-over holds the lock for the waiter's TTL, a
	// FairMutex's for what its registration has left (fair_lib.lua): three
	// refreshes.
	waiterRefresh := 20 * time.Second
	if fair {
		waiterRefresh = time.Second
	}
	waiters := newClient(t, backends[0].newRedis(t), dlock.WithTTL(300*time.Millisecond), dlock.WithWaiterRefresh(waiterRefresh))
	clk := dlock.UseClock(waiters)
	suspended := make(chan struct{})
	var once sync.Once
	dlock.OnAttempt(waiters, func(r dlock.AttemptReport) {
		if r.Entry != "" && len(r.Reply) > 0 && r.Reply[0] != 1 { // refused, registered to be handed the lock
			once.Do(func() { clk.Suspend(); close(suspended) })
		}
	})
	lock := func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) {
		if fair {
			return c.FairMutex(name).Lock
		}
		return c.Mutex(name).Lock
	}
	holder, err := lock(newClient(t, backends[0].newRedis(t), dlock.WithTTL(time.Minute)))(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lease *dlock.Lease
		err   error
	}
	waited := make(chan result, 1)
	go func() {
		lease, err := lock(waiters)(ctx)
		waited <- result{lease, err}
	}()
	waitDone(t, suspended, 10*time.Second, "the waiter registering")
	if err := holder.Unlock(ctx); err != nil { // hands the lock to the suspended waiter
		t.Fatal(err)
	}
	other, err := lock(newClient(t, backends[0].newRedis(t), dlock.WithTTL(time.Minute), dlock.WithWait(10*time.Second)))(ctx)
	if err != nil {
		t.Fatalf("the lock once the hand-over expired: %v", err)
	}
	select {
	case r := <-waited:
		t.Errorf("Lock returned while its process was suspended: token %d, %v (another holds the lock since, token %d)", r.lease.Token(), r.err, other.Token())
		waited <- r
	default:
	}
	clk.Resume()
	time.Sleep(100 * time.Millisecond) // the waiter acts on the hand-over, and waits on
	if err := other.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-waited
	if r.err != nil {
		t.Fatalf("Lock: %v", r.err)
	}
	defer func() { _ = r.lease.Unlock(ctx) }()
	if r.lease.Token() <= other.Token() {
		t.Errorf("Lock returned token %d, not above %d of the holder since the hand-over", r.lease.Token(), other.Token())
	}
	if err := r.lease.Err(); err != nil {
		t.Errorf("Lock returned a lease lost: %v", err)
	}
}

// The same for a Redlock: a majority whose replies are read after a
// suspension that used up the TTL by the wall clock is no grant.
func TestRedlock_GrantReadAfterASuspensionIsNotReturnedLost(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	servers := redistest.StartMasters(t, 3)
	clients := make([]redis.UniversalClient, len(servers))
	var clk *clock.Clock
	var resumed atomic.Bool
	for i, srv := range servers {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		rdb.AddHook(&commandCounter{onReply: func(cmd redis.Cmder) {
			if runs(cmd, scripts.MutexAcquire) && !resumed.Swap(true) {
				clk.Jump(2 * time.Minute) // the replies are read after a two-minute suspension
			}
		}})
		clients[i] = rdb
	}
	r := mustRedlock(t, clients, dlock.WithRestartGuard(0), dlock.WithTTL(time.Minute))
	clk = dlock.UseClock(r)
	lease, err := r.Mutex(lockName(t)).TryLock(ctx)
	if !resumed.Load() {
		t.Fatal("no grant's reply was seen")
	}
	if err == nil {
		t.Fatalf("TryLock returned a lease (Err %v) from votes read after the TTL ran out by the wall clock", lease.Err())
	}
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock: %v, want ErrNotAcquired", err)
	}
	for _, srv := range servers {
		expectFree(t, ctx, srv.Client(), lockName(t))
	}
}

// An Extend confirmed only after the lease's deadline does not bring the
// lease back: the lease was reported lost at its deadline, and stays so.
func TestLease_ExtendConfirmedAfterTheDeadlineReportsTheLoss(t *testing.T) {
	rdb := backends[0].newRedis(t)
	var delayUntil atomic.Pointer[time.Time]
	rdb.AddHook(&commandCounter{onReply: func(cmd redis.Cmder) {
		if until := delayUntil.Load(); until != nil && runs(cmd, scripts.MutexExtend) {
			time.Sleep(time.Until(*until)) // the workload: a reply held up on the way
		}
	}})
	ctx := ctxFor(t, 30*time.Second)
	mu := newClient(t, rdb, dlock.WithLeaseTime(300*time.Millisecond)).Mutex(lockName(t))
	lease, err := mu.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	late := lease.Deadline().Add(50 * time.Millisecond)
	delayUntil.Store(&late)
	if err := lease.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Extend whose reply came after the deadline: %v, want ErrLeaseLost", err)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Err after the late Extend: %v, want ErrLeaseLost", err)
	}
	delayUntil.Store(nil)
	// Redis applied the extension: the hold is still ours there, and Unlock
	// releases it.
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the hold the late Extend kept: %v", err)
	}
	expectFree(t, ctx, rdb, mu.Name())
}

// A lease lost on this side but still held in Redis is released by Unlock,
// which returns nil; a second Unlock is refused, as after any release, even
// though the release left a mark that a resent copy of it would find.
func TestLease_SecondUnlockOfALostButReleasedLeaseIsRefused(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	c := newClient(t, backends[0].newRedis(t), dlock.WithTTL(time.Minute))
	clk := dlock.UseClock(c)
	lease, err := c.Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clk.Jump(2 * time.Minute) // counted lost; the key has a minute left
	if err := lease.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Err: %v, want ErrLeaseLost", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of a lost lease still held in Redis: %v, want nil", err)
	}
	if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
}

// An Extend to a shorter TTL whose outcome is unknown (the server stalled,
// the call's context ended) may have been applied, or may yet be, by the
// command waiting in the server: the lease counts on no more than it would
// leave, and renews at the shorter TTL from then on.
func TestLease_FailedExtendToAShorterTTLCountsOnTheShorterOne(t *testing.T) {
	srv := startServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb, dlock.WithTTL(30*time.Second))
	ctx := ctxFor(t, 30*time.Second)
	lease, err := c.Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Extend(ctx, 30*time.Second); err != nil { // the script is loaded
		t.Fatal(err)
	}
	srv.Pause()
	sent := time.Now()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = lease.Extend(short, 2*time.Second) // waits in the stalled server's socket
	cancel()
	srv.Resume()
	if err == nil {
		t.Fatal("Extend on a stalled server returned nil")
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

// An Extend to a shorter TTL cuts the key's life when Redis applies it, not
// when its reply arrives: while the reply is on its way (a slow link, a
// process stopped before it reads it), the key may expire and the lock go
// to another. So the lease counts on no more than the shorter TTL leaves
// from the moment the Extend is sent, not once its reply is in.
func TestLease_ExtendToAShorterTTLCountsOnItWhileItsReplyIsOnItsWay(t *testing.T) {
	const short = 500 * time.Millisecond
	rdb := backends[0].newRedis(t)
	var holding atomic.Bool
	release := make(chan struct{}) // lets the held reply through
	rdb.AddHook(&commandCounter{onReply: func(cmd redis.Cmder) {
		if holding.Load() && runs(cmd, scripts.MutexExtend) {
			<-release // the workload: the Extend's reply held up on the way
		}
	}})
	ctx := ctxFor(t, 30*time.Second)
	name := lockName(t)
	lease, err := newClient(t, rdb, dlock.WithTTL(30*time.Second)).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Extend(ctx, 30*time.Second); err != nil { // the script is loaded: the next Extend is one command
		t.Fatal(err)
	}
	holding.Store(true)
	sent := time.Now()
	extended := make(chan error, 1)
	go func() { extended <- lease.Extend(ctx, short) }()
	defer func() {
		close(release)
		if err := <-extended; err == nil {
			t.Errorf("Extend(%v) confirmed %v after it was sent, past the key's expiry: nil, want the loss", short, time.Since(sent))
		}
	}()
	// Redis applied the Extend: the key expires short after it, and a
	// waiter is granted the lock then, the Extend's reply still held.
	next, err := newClient(t, backends[0].newRedis(t), dlock.WithWait(10*time.Second)).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatalf("the lock after the shortened key's expiry: %v", err)
	}
	defer func() { _ = next.Unlock(ctx) }()
	if err := lease.Err(); err == nil {
		t.Errorf("another holds %q (token %d), %v after Extend(%v) was sent, while the first lease (token %d) says it holds, until %v from now",
			name, next.Token(), time.Since(sent), short, lease.Token(), time.Until(lease.Deadline()))
	}
	if d := lease.Deadline(); d.After(sent.Add(short)) {
		t.Errorf("deadline %v after the Extend(%v) was sent; want no later than its TTL from then", d.Sub(sent), short)
	}
}

// The explorer's case of it (two Election leaders): the holder's machine is
// suspended just after it sends an Extend to a shorter TTL, and reads the
// reply only once resumed, past the deadline it had before. Redis expired
// the key the shorter TTL after the Extend, and gave the lock to another:
// the lease, lost, must say it counted on it no longer than that.
func TestLease_ExtendToAShorterTTLReadAfterASuspensionCountedOnNoMore(t *testing.T) {
	const short, ttl = 300 * time.Millisecond, 1500 * time.Millisecond
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb, dlock.WithTTL(ttl))
	clk := dlock.UseClock(c)
	var holding atomic.Bool
	resumed := make(chan struct{})
	rdb.AddHook(&commandCounter{onReply: func(cmd redis.Cmder) {
		if holding.Load() && runs(cmd, scripts.MutexExtend) {
			clk.Suspend() // before the process reads the reply
			<-resumed
		}
	}})
	ctx := ctxFor(t, 30*time.Second)
	name := lockName(t)
	lease, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Extend(ctx, ttl); err != nil { // the script is loaded: the next Extend is one command
		t.Fatal(err)
	}
	holding.Store(true)
	sent := time.Now()
	extended := make(chan error, 1)
	go func() { extended <- lease.Extend(ctx, short) }()
	next, err := newClient(t, backends[0].newRedis(t), dlock.WithWait(10*time.Second)).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatalf("the lock after the shortened key's expiry: %v", err)
	}
	granted := time.Since(sent)
	defer func() { _ = next.Unlock(ctx) }()
	time.Sleep(time.Until(sent.Add(ttl))) // the workload: suspended past the deadline before the Extend
	clk.Resume()
	close(resumed)
	if err := <-extended; err == nil {
		t.Errorf("Extend(%v) whose reply was read %v after it was sent: nil, want the loss", short, time.Since(sent))
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Err after the resume: %v, want ErrLeaseLost", err)
	}
	if d := clk.Real(lease.Deadline()); d.After(sent.Add(short)) {
		t.Errorf("deadline %v after the Extend(%v) was sent, while another held the lock from %v after it",
			d.Sub(sent), short, granted)
	}
}

// sendSignal is a go-redis hook that closes sent once a command running
// script has been handed to the connection.
type sendSignal struct {
	script *redis.Script
	once   sync.Once
	sent   chan struct{}
}

func (h *sendSignal) note(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if runs(cmd, h.script) {
			h.once.Do(func() { close(h.sent) })
		}
	}
}

func (h *sendSignal) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *sendSignal) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.note(cmd); return next(ctx, cmd) }
}
func (h *sendSignal) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.note(cmds...); return next(ctx, cmds) }
}

// A renewal stuck on a stalled server, on a client with no read timeout
// (go-redis then waits for the reply whatever the context says), must not
// hold an Extend beyond the Extend's own context.
func TestLease_ExtendBehindAStuckRenewalEndsWithItsContext(t *testing.T) {
	srv := startServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	renewal := &sendSignal{script: scripts.MutexExtend, sent: make(chan struct{})}
	rdb.AddHook(renewal)
	ctx := ctxFor(t, 30*time.Second)
	lease, err := newClient(t, rdb, dlock.WithTTL(900*time.Millisecond)).Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	waitDone(t, renewal.sent, 10*time.Second, "the first renewal")

	extended := make(chan error, 1)
	go func() {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		extended <- lease.Extend(short, time.Minute)
	}()
	select {
	case err := <-extended:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Extend behind a stuck renewal: %v; want its context's deadline", err)
		}
	case <-time.After(10 * time.Second): // the guard: the context's 200 ms are long past
		t.Fatal("Extend still waiting 10 s after its 200 ms context ended, behind a stuck renewal")
	}
}

// Close cancels the renewals under way and waits for them, but no longer
// than CleanupTimeout: one stuck on a stalled server, on a client with no
// read timeout (go-redis then ignores the cancel), must not hold Close for
// as long as the server is stalled.
func TestClient_CloseBehindAStuckRenewalReturnsWithinTheCleanupTimeout(t *testing.T) {
	srv := startServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	renewal := &sendSignal{script: scripts.MutexExtend, sent: make(chan struct{})}
	rdb.AddHook(renewal)
	ctx := ctxFor(t, 30*time.Second)
	c, err := dlock.New(rdb, dlock.WithTTL(900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mutex(lockName(t)).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	waitDone(t, renewal.sent, 10*time.Second, "the first renewal")

	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(dlock.CleanupTimeout + 3*time.Second): // the promised bound, and slack for a loaded machine
		t.Fatalf("Close still waiting %v after it began, behind a stuck renewal; want at most CleanupTimeout (%v)",
			dlock.CleanupTimeout+3*time.Second, dlock.CleanupTimeout)
	}
}

// blockedLog holds the log record of a lease's loss until released: the
// lease is ending, not yet ended, meanwhile.
type blockedLog struct {
	entered, release chan struct{}
	once             sync.Once
}

func (h *blockedLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *blockedLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *blockedLog) WithGroup(string) slog.Handler            { return h }
func (h *blockedLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "dlock: lease lost" {
		h.once.Do(func() { close(h.entered) })
		<-h.release
	}
	return nil
}

// A lease's Err while another goroutine ends it gives the loss it ends
// with. A fixed lease past its deadline ran out (LossExpired, where Err
// said LossUnreachable); a renewal found the hold gone (LossExpired, where
// Err said nil: held).
func TestLease_ErrWhileTheLeaseEndsGivesTheLossItEndsWith(t *testing.T) {
	for _, tc := range []struct {
		name string
		ttl  dlock.Option
		end  func(ctx context.Context, t *testing.T, rdb redis.UniversalClient, name string, clk *clock.Clock, lease *dlock.Lease)
	}{
		{"fixed lease past its deadline", dlock.WithLeaseTime(time.Minute),
			func(_ context.Context, _ *testing.T, _ redis.UniversalClient, _ string, clk *clock.Clock, lease *dlock.Lease) {
				clk.Jump(2 * time.Minute)
				go lease.Err() // ends the lease, held up in its log
			}},
		{"renewal refused", dlock.WithTTL(6 * time.Second),
			func(ctx context.Context, t *testing.T, rdb redis.UniversalClient, name string, _ *clock.Clock, _ *dlock.Lease) {
				if err := rdb.Del(ctx, lockKey(name)).Err(); err != nil { // the renewal at 2 s finds it gone
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t, 30*time.Second)
			logs := &blockedLog{entered: make(chan struct{}), release: make(chan struct{})}
			rdb := backends[0].newRedis(t)
			c := newClient(t, rdb, tc.ttl, dlock.WithLogger(slog.New(logs)))
			clk := dlock.UseClock(c)
			name := lockName(t)
			lease, err := c.Mutex(name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			tc.end(ctx, t, rdb, name, clk, lease)
			waitDone(t, logs.entered, 10*time.Second, "the loss logged")
			during := lease.Err()
			close(logs.release)
			waitDone(t, lease.Done(), 10*time.Second, "the lease ended")
			final := lease.Err()
			if !errors.Is(final, dlock.LossExpired) {
				t.Fatalf("the lease ended with %v; want LossExpired", final)
			}
			if !errors.Is(during, dlock.LossExpired) {
				t.Fatalf("Err while the lease was ending: %v; it ends with %v", during, final)
			}
		})
	}
}
