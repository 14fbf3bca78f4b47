package dlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/family"
	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
)

// lockType is one kind of lock as the late-copy tests drive it: the call
// that gives up (take), the scripts it runs, and what holds the lock so
// that take has to wait (hold; take itself when nil).
type lockType struct {
	name                     string
	acquire, extend, release *redis.Script
	take, hold               taker
}

// lockTypes are the family's kinds on a Client's server: a Semaphore of one
// permit, a MultiLock of two names.
var lockTypes = func() []lockType {
	var types []lockType
	for _, k := range serverKinds() {
		lt := lockType{name: k.Label(), acquire: k.Scripts.Acquire, extend: k.Scripts.Extend, release: k.Scripts.Release, take: lockOn(k, 1, pairOf)}
		if h := holderOf(k); h != nil {
			lt.hold = lockOn(*h, 1, pairOf)
		}
		types = append(types, lt)
	}
	return types
}()

// pairOf is the MultiLock group the late-copy tests take under name.
func pairOf(name string) []string { return []string{name, name + "-b"} }

// forEachLockType runs f for every lock type on every backend, the lock
// types at once: each waits on its own names' timers, not on the CPU.
func forEachLockType(t *testing.T, f func(t *testing.T, b backend, lt lockType)) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, lt := range lockTypes {
			t.Run(lt.name, func(t *testing.T) {
				t.Parallel()
				f(t, b, lt)
			})
		}
	})
}

var errReplyLost = errors.New("test: the reply was lost on the way")

// copier is a go-redis hook that keeps a copy of every command running
// script, so that a test can send it again later, on another connection, as
// go-redis does after a read timeout. With loseFirst it also drops the
// reply of the first copy the server applied, as a timeout would.
type copier struct {
	script     *redis.Script
	loseFirst  bool
	onGrant    func()        // called once, when the server first grants an attempt
	slowReply  time.Duration // how late the first reply of slowStatus (after slowAfter) comes
	slowStatus int64         // 1 a grant, 0 a refusal
	slowAfter  int           // how many replies of slowStatus come at once before it

	mu     sync.Mutex
	copies [][]any
	lost   bool
}

func (h *copier) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *copier) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.keep(cmd, err) {
			cmd.SetErr(errReplyLost)
			return errReplyLost
		}
		return err
	}
}

func (h *copier) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if h.keep(cmd, cmd.Err()) {
				cmd.SetErr(errReplyLost)
			}
		}
		return err
	}
}

// keep copies cmd if it runs the script, and says whether to lose its reply.
// err is the reply's error: inside a process hook, go-redis sets it on cmd
// only after the hooks return. A call refused with NOSCRIPT is no copy:
// the server ran nothing, and dlock sends it again once the script is
// loaded (whether it meets NOSCRIPT depends on what earlier tests left on
// the shared servers).
func (h *copier) keep(cmd redis.Cmder, err error) bool {
	if !runs(cmd, h.script) || !isScriptCall(cmd) || missingScript(err) {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.copies = append(h.copies, slices.Clone(cmd.Args()))
	lose := h.loseFirst && !h.lost && err == nil
	h.lost = h.lost || lose
	if h.onGrant != nil && isReplyOf(cmd, h.script, 1) {
		h.onGrant()
		h.onGrant = nil
	}
	if h.slowReply > 0 && isReplyOf(cmd, h.script, h.slowStatus) {
		if h.slowAfter > 0 {
			h.slowAfter--
		} else {
			time.Sleep(h.slowReply) // the fault: a reply as slow as a read timeout
			h.slowReply = 0
		}
	}
	return lose
}

func (h *copier) sent() [][]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.copies)
}

// resend sends every kept copy again on another client and fails the test
// if one of them was granted.
func (h *copier) resend(t *testing.T, ctx context.Context, other redis.UniversalClient) {
	t.Helper()
	h.resendFirst(t, ctx, other, len(h.sent()))
}

// resendFirst is resend of the first n copies only.
func (h *copier) resendFirst(t *testing.T, ctx context.Context, other redis.UniversalClient, n int) {
	t.Helper()
	copies := h.sent()
	if len(copies) == 0 {
		t.Fatal("no attempt was sent")
	}
	for _, args := range copies[:n] {
		res, err := scripts.AcquireReply(other.Do(ctx, args...))
		if err != nil {
			t.Fatalf("late copy: %v", err)
		}
		if res[0] == 1 {
			t.Fatalf("a late copy of an attempt whose call gave up was granted: %v", res)
		}
	}
}

// expectNothingLeft fails the test if anything under the lock's names is
// held or registered: only fencing counters, a Semaphore's permits, an
// Election's last leader, tombstones and release marks may be left.
func expectNothingLeft(t *testing.T, ctx context.Context, rdb redis.UniversalClient, name, when string) {
	t.Helper()
	for _, key := range keysOn(t, ctx, rdb, "*{"+name+"*") {
		switch {
		case strings.HasSuffix(key, "}:fence"), strings.HasSuffix(key, "}:permits"), strings.HasSuffix(key, "}:leader"),
			strings.Contains(key, "}:void:"), strings.Contains(key, "}:released:"):
		default:
			t.Fatalf("%s: %q is left", when, key)
		}
	}
}

// expectNoneWaiting fails the test if any waiter is registered under the
// lock's names.
func expectNoneWaiting(t *testing.T, ctx context.Context, rdb redis.UniversalClient, name, when string) {
	t.Helper()
	for _, key := range keysOn(t, ctx, rdb, "*{"+name+"*") {
		if strings.HasSuffix(key, ":waiters") || strings.HasSuffix(key, ":rwaiters") || strings.HasSuffix(key, ":queue") {
			t.Fatalf("%s: %q is registered", when, key)
		}
	}
}

// expectTombstonesBounded fails the test unless a tombstone is there, and
// every tombstone expires within the time a late copy can still arrive.
func expectTombstonesBounded(t *testing.T, ctx context.Context, rdb redis.UniversalClient, name string) {
	t.Helper()
	found := false
	for _, key := range keysOn(t, ctx, rdb, "*{"+name+"*") {
		if !strings.Contains(key, "}:void:") {
			continue
		}
		found = true
		if left := rdb.PTTL(ctx, key).Val(); left <= 0 || left > dlock.TombstoneLife {
			t.Fatalf("tombstone %q expires in %v; want within %v", key, left, dlock.TombstoneLife)
		}
	}
	if !found {
		t.Fatal("the call gave up without a tombstone")
	}
}

// expectNoSecretInKeys fails the test if a key name under the lock's names
// shows the owner token (or hold id) of an attempt.
func expectNoSecretInKeys(t *testing.T, ctx context.Context, rdb redis.UniversalClient, name string, copies [][]any) {
	t.Helper()
	keys := keysOn(t, ctx, rdb, "*{"+name+"*")
	for _, args := range copies {
		first, _ := scripts.Arg(args, "OWNER").(string) // the owner token, or a hold's member
		secrets := []string{first}
		if len(first) > 33 {
			secrets = append(secrets, first[1:33]) // a hold id
		}
		for _, key := range keys {
			for _, secret := range secrets {
				if strings.Contains(key, secret) {
					t.Fatalf("key %q shows an owner token", key)
				}
			}
		}
	}
}

// A call whose attempt was applied but whose reply was lost gives up, and
// its abandon releases the lock; a copy of that attempt sent again
// afterwards (go-redis resends after a read timeout, on a new connection)
// must be refused and leave nothing held. No key shows the owner token.
func TestLateAttempt_AppliedThenLostIsRefusedAfterTheAbandon(t *testing.T) {
	forEachLockType(t, func(t *testing.T, b backend, lt lockType) {
		ctx := ctxFor(t, 30*time.Second)
		name := lockName(t)
		other := b.newRedis(t)
		rdb := b.newRedis(t)
		copies := &copier{script: lt.acquire, loseFirst: true}
		rdb.AddHook(copies)

		if _, err := lt.take(newClient(t, rdb), name)(ctx); !errors.Is(err, errReplyLost) {
			t.Fatalf("call whose reply was lost: %v, want the loss", err)
		}
		expectNothingLeft(t, ctx, other, name, "after the abandon")
		expectNoSecretInKeys(t, ctx, other, name, copies.sent())
		copies.resend(t, ctx, other)
		expectNothingLeft(t, ctx, other, name, "after a late copy")
	})
}

// A call whose context ends just as its attempt is granted gives the lock
// back rather than return it; a copy of the granted attempt still on its
// way must then take nothing.
func TestLateAttempt_GrantedAsItsCallGaveUpIsRefused(t *testing.T) {
	forEachLockType(t, func(t *testing.T, b backend, lt lockType) {
		ctx := ctxFor(t, 30*time.Second)
		name := lockName(t)
		other := b.newRedis(t)
		rdb := b.newRedis(t)
		callCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		copies := &copier{script: lt.acquire, onGrant: cancel}
		rdb.AddHook(copies)

		if _, err := lt.take(newClient(t, rdb), name)(callCtx); !errors.Is(err, context.Canceled) {
			t.Fatalf("call cancelled as it was granted: %v, want context.Canceled", err)
		}
		expectNothingLeft(t, ctx, other, name, "after the call gave the lock back")
		copies.resend(t, ctx, other)
		expectNothingLeft(t, ctx, other, name, "after a late copy")
	})
}

// A grant whose reply took as long as a read timeout may have been sent
// twice by go-redis, and the other copy may still be on its way: once the
// lease is released, that copy must take nothing. A grant that came sooner
// was sent once, and its release leaves no tombstone to pile up.
func TestLateAttempt_OfASlowGrantIsRefusedAfterTheUnlock(t *testing.T) {
	forEachLockType(t, func(t *testing.T, b backend, lt lockType) {
		ctx := ctxFor(t, 30*time.Second)
		name := lockName(t)
		other := b.newRedis(t)
		rdb := withReadTimeout(t, other)
		copies := &copier{script: lt.acquire, slowReply: readTimeout * 3 / 2, slowStatus: 1}
		rdb.AddHook(copies)

		lease, err := lt.take(newClient(t, rdb), name)(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// The slow one, which came first; the others (a MultiLock's other
		// slots on a cluster) were answered in time, and sent once.
		copies.resendFirst(t, ctx, other, 1)
		expectNothingLeft(t, ctx, other, name, "after a late copy of a slow grant")

		// A fast grant (the default read timeout is seconds): no tombstone.
		lease, err = lt.take(newClient(t, other), name)(ctx)
		if err != nil {
			t.Fatal(err)
		}
		voids := func() (n int) {
			for _, key := range keysOn(t, ctx, other, "*{"+name+"*") {
				if strings.Contains(key, "}:void:") {
					n++
				}
			}
			return n
		}
		before := voids()
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if after := voids(); after != before {
			t.Fatalf("the release of a fast grant left a tombstone (%d before, %d after)", before, after)
		}
	})
}

// A TryLock refused, but so slowly that go-redis may have sent its attempt
// twice, leaves a tombstone: the other copy, arriving once the lock is
// free, takes nothing.
func TestLateAttempt_OfASlowRefusalTakesNothingOnceTheLockIsFree(t *testing.T) {
	forEachLockType(t, func(t *testing.T, b backend, lt lockType) {
		ctx := ctxFor(t, 30*time.Second)
		name := lockName(t)
		other := b.newRedis(t)
		hold := lt.hold
		if hold == nil {
			hold = lt.take
		}
		holder, err := hold(newClient(t, other), name)(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rdb := withReadTimeout(t, other)
		copies := &copier{script: lt.acquire, slowReply: readTimeout * 3 / 2, slowStatus: 0}
		rdb.AddHook(copies)
		if _, err := lt.take(newClient(t, rdb, dlock.WithWait(0)), name)(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("a try of a held lock: %v, want ErrNotAcquired", err)
		}
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		copies.resendFirst(t, ctx, other, 1)
		expectNothingLeft(t, ctx, other, name, "a late copy of a slow refusal once the lock is free")
	})
}

// readTimeout is the read timeout of withReadTimeout's clients.
const readTimeout = 200 * time.Millisecond

// withReadTimeout is a client of the same deployment as like, with a read
// timeout of readTimeout.
func withReadTimeout(t *testing.T, like redis.UniversalClient) redis.UniversalClient {
	var rdb redis.UniversalClient
	switch like.(type) {
	case *redis.ClusterClient:
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: sharedCluster().Addrs(), ReadTimeout: readTimeout})
	default:
		rdb = redis.NewClient(&redis.Options{Addr: sharedStandalone().Addr(), ReadTimeout: readTimeout})
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// A waiter that gives up (its context ends) leaves the line; no copy of any
// of its attempts arriving afterwards may register it again (the next
// release would hand the lock to, or wake, a call that has gone) or take
// the lock once it is free.
func TestLateAttempt_OfAWaiterThatGaveUpRegistersAndTakesNothing(t *testing.T) {
	forEachLockType(t, func(t *testing.T, b backend, lt lockType) {
		ctx := ctxFor(t, 30*time.Second)
		name := lockName(t)
		other := b.newRedis(t)
		hold := lt.hold
		if hold == nil {
			hold = lt.take
		}
		holder, err := hold(newClient(t, other), name)(ctx)
		if err != nil {
			t.Fatal(err)
		}

		rdb := b.newRedis(t)
		copies := &copier{script: lt.acquire}
		rdb.AddHook(copies)
		// A TTL of years: the tombstone must not last as long.
		waiter := newClient(t, rdb, dlock.WithTTL(365*24*time.Hour))
		attempts := countAttemptsOf(waiter, lt.acquire)
		waitCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		result := make(chan error, 1)
		take := lt.take(waiter, name)
		go func() {
			_, err := take(waitCtx)
			result <- err
		}()
		waitDone(t, attempts.registeredReach(1), 10*time.Second, "the waiter registering")
		cancel()
		if err := <-result; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait: %v", err)
		}

		expectNoSecretInKeys(t, ctx, other, name, copies.sent())
		expectTombstonesBounded(t, ctx, other, name)
		copies.resend(t, ctx, other)
		expectNoneWaiting(t, ctx, other, name, "a late copy while the lock is held")
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		expectNothingLeft(t, ctx, other, name, "after the holder's release")
		copies.resend(t, ctx, other)
		expectNothingLeft(t, ctx, other, name, "a late copy once the lock is free")
	})
}

// A copy of a refused attempt may arrive after a later attempt of the same
// call was granted (go-redis resends after a read timeout, on another
// connection): it must find the call's own hold and report that one, not
// take a second hold (or permit) the caller never hears of, which would
// outlive the Unlock by its whole TTL and keep others out; nor register a
// waiter for a call that is no longer waiting. A Semaphore of two permits,
// both held, shows the permit a copy would take.
func TestLateAttempt_OfARefusalAfterItsCallWasGrantedCountsOnce(t *testing.T) {
	t.Parallel()
	type lockCase struct {
		lockType
		holders int // holds taken, each by another handle, so that take waits
	}
	cases := []lockCase{{lockType: lockType{name: "Semaphore-2", acquire: scripts.SemAcquire,
		take: lockOn(family.MustOf(observe.KindSemaphore), 2, nil)}, holders: 2}}
	for _, lt := range lockTypes {
		cases = append(cases, lockCase{lockType: lt, holders: 1})
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, lc := range cases {
			t.Run(lc.name, func(t *testing.T) {
				ctx := ctxFor(t, 30*time.Second)
				name := lockName(t)
				other := b.newRedis(t)
				hold := lc.hold
				if hold == nil {
					hold = lc.take
				}
				var holders []*dlock.Lease
				for range lc.holders {
					l, err := hold(newClient(t, other), name)(ctx)
					if err != nil {
						t.Fatal(err)
					}
					holders = append(holders, l)
				}

				rdb := b.newRedis(t)
				copies := &copier{script: lc.acquire}
				rdb.AddHook(copies)
				waiter := newClient(t, rdb)
				attempts := countAttemptsOf(waiter, lc.acquire)
				result := make(chan *dlock.Lease, 1)
				take := lc.take(waiter, name)
				go func() {
					l, err := take(ctx)
					if err != nil {
						t.Error(err)
					}
					result <- l
				}()
				waitDone(t, attempts.registeredReach(1), 10*time.Second, "the waiter registering")
				for _, l := range holders {
					if err := l.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
				lease := <-result
				if lease == nil {
					t.FailNow()
				}

				held := map[int64]bool{} // a MultiLock on a cluster: a token per group
				for _, token := range lease.Tokens() {
					held[int64(token)] = true
				}
				for _, args := range copies.sent() {
					res, err := scripts.AcquireReply(other.Do(ctx, args...))
					if err != nil {
						t.Fatalf("late copy: %v", err)
					}
					if res[0] == 1 && !held[res[1]] {
						t.Fatalf("a late copy was granted with token %d; the call holds %v", res[1], lease.Tokens())
					}
				}
				expectNoneWaiting(t, ctx, other, name, "late copies of the call's attempts while it holds")
				if err := lease.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				expectNothingLeft(t, ctx, other, name, "the Unlock after late copies of the call's attempts")
			})
		}
	})
}

// resender is a go-redis hook that, the first time the server applies the
// script, loses the reply and sends the command again, as go-redis does
// after a read timeout.
type resender struct {
	script *redis.Script
	mu     sync.Mutex
	done   bool
}

func (h *resender) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *resender) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && runs(cmd, h.script) && h.first() {
			err = next(ctx, cmd)
		}
		return err
	}
}

func (h *resender) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *resender) first() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	first := !h.done
	h.done = true
	return first
}

// An Unlock whose release was applied succeeds, even when its reply was
// lost and the copy go-redis sent again found nothing left to release.
func TestLease_UnlockWhoseReplyWasLostAndResentSucceeds(t *testing.T) {
	forEachLockType(t, func(t *testing.T, b backend, lt lockType) {
		ctx := ctxFor(t, 30*time.Second)
		name := lockName(t)
		rdb := b.newRedis(t)
		lease, err := lt.take(newClient(t, rdb), name)(ctx)
		if err != nil {
			t.Fatal(err)
		}
		resend := &resender{script: lt.release}
		rdb.AddHook(resend)
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("Unlock whose release was applied, then resent: %v", err)
		}
		if resend.first() {
			t.Fatal("the release was not resent")
		}
		expectNothingLeft(t, ctx, rdb, name, "after the Unlock")
	})
}

// A copy of a waiter's refused attempt, resent by go-redis, may arrive once
// the lock is free but before its call gives up: it is granted under the
// call's owner, and nobody hears of it. When the call then gives up, what
// the copy took must go with it, not stay held for its whole TTL. The
// holder's hold is lost without a release (deleted, as by an eviction), so
// that nothing wakes the waiter meanwhile.
func TestLateAttempt_GrantedBeforeItsWaiterGaveUpIsGivenBack(t *testing.T) {
	forEachLockType(t, func(t *testing.T, b backend, lt lockType) {
		ctx := ctxFor(t, 30*time.Second)
		name := lockName(t)
		other := b.newRedis(t)
		hold := lt.hold
		if hold == nil {
			hold = lt.take
		}
		// Long holds and refreshes: the waiter tries again only when told to.
		slow := []dlock.Option{dlock.WithTTL(time.Hour), dlock.WithWaiterRefresh(time.Hour)}
		if _, err := hold(newClient(t, other, slow...), name)(ctx); err != nil {
			t.Fatal(err)
		}

		rdb := b.newRedis(t)
		copies := &copier{script: lt.acquire}
		rdb.AddHook(copies)
		waiter := newClient(t, rdb, slow...)
		attempts := countAttemptsOf(waiter, lt.acquire)
		waitCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		result := make(chan error, 1)
		take := lt.take(waiter, name)
		go func() {
			_, err := take(waitCtx)
			result <- err
		}()
		waitDone(t, attempts.registeredReach(1), 10*time.Second, "the waiter registering")

		for _, key := range keysOn(t, ctx, other, "*{"+name+"*") {
			if err := other.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
		}
		res, err := scripts.AcquireReply(other.Do(ctx, copies.sent()[0]...))
		if err != nil || res[0] != 1 {
			t.Fatalf("the late copy on a free lock: %v, %v; want granted", res, err)
		}
		cancel()
		if err := <-result; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait: %v", err)
		}
		expectNothingLeft(t, ctx, other, name, "after the waiter gave up")
	})
}

// A grant whose reply is read late (after a suspension of the machine,
// here) is confirmed by an extension before it is returned; meanwhile its
// hold may have run out in Redis, another may have held the lock and let
// it go, and a late copy of the same attempt, under the same owner, taken
// the lock again, with a new token. The extension then finds the hold its
// owner's, but it is not the hold the grant's token was minted for: a
// lease returned with that token would hold the lock with a token lower
// than the hold before it (soak seed 1795707226476120556, "token order").
// It must come back refused, or with a token above the other's.
func TestLateAttempt_RetakingAGrantReadAfterASuspensionIsNoConfirmation(t *testing.T) {
	forEachLockType(t, func(t *testing.T, b backend, lt lockType) {
		ctx := ctxFor(t, 30*time.Second)
		name := lockName(t)
		other := b.newRedis(t)
		rdb := b.newRedis(t)
		c := newClient(t, rdb, dlock.WithTTL(time.Minute))
		clk := dlock.UseClock(c)
		var (
			once        sync.Once
			othersToken uint64
			copyReply   []int64
			steps       error
		)
		rdb.AddHook(&commandCounter{onReply: func(cmd redis.Cmder) {
			if !isReplyOf(cmd, lt.acquire, 1) {
				return
			}
			once.Do(func() {
				// While the process is suspended: its hold runs out (the
				// keys of the lock go, but for its fencing counter)...
				// (A MultiLock's second lock is name-b.)
				keys := append(keysOn(t, ctx, other, "*{"+name+"}*"), keysOn(t, ctx, other, "*{"+name+"-b}*")...)
				for _, key := range keys {
					if !strings.HasSuffix(key, ":fence") {
						if steps = other.Del(ctx, key).Err(); steps != nil {
							return
						}
					}
				}
				// ...another takes the lock and lets it go...
				lease, err := lt.take(newClient(t, other), name)(ctx)
				if err != nil {
					steps = err
					return
				}
				othersToken = lease.Token()
				if steps = lease.Unlock(ctx); steps != nil {
					return
				}
				// ...and a late copy of the attempt takes it again.
				copyReply, steps = scripts.AcquireReply(other.Do(ctx, cmd.Args()...))
				clk.Jump(2 * time.Minute) // the reply is read after a two-minute suspension
			})
		}})
		lease, err := lt.take(c, name)(ctx)
		if steps != nil {
			t.Fatalf("while the grant's reply was on its way: %v", steps)
		}
		if len(copyReply) == 0 || copyReply[0] != 1 {
			t.Fatalf("the late copy on a free lock: %v; want granted", copyReply)
		}
		if err != nil {
			if !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("take: %v, want ErrNotAcquired or a lease", err)
			}
			return
		}
		defer func() { _ = lease.Unlock(ctx) }()
		for lock, token := range lease.Tokens() {
			if token <= othersToken {
				t.Errorf("lease returned with token %d on %s, after a hold with token %d had ended; the late copy's reply: %v",
					token, lock, othersToken, copyReply)
			}
		}
	})
}

// A TryLock whose grant is read past its deadline (here after a
// suspension) finds it expired and gives it back; the call is over, so a
// late copy of its attempt, arriving after that, must take nothing: the
// give-up leaves the call's tombstone, as any give-up does.
func TestLateAttempt_OfATryWhoseGrantExpiredUnconfirmedTakesNothing(t *testing.T) {
	forEachLockType(t, func(t *testing.T, b backend, lt lockType) {
		ctx := ctxFor(t, 30*time.Second)
		name := lockName(t)
		other := b.newRedis(t)
		rdb := b.newRedis(t)
		copies := &copier{script: lt.acquire}
		rdb.AddHook(copies)
		c := newClient(t, rdb, dlock.WithTTL(time.Minute), dlock.WithWait(0))
		clk := dlock.UseClock(c)
		var once sync.Once
		rdb.AddHook(&commandCounter{onReply: func(cmd redis.Cmder) {
			if isReplyOf(cmd, lt.acquire, 1) {
				once.Do(func() { clk.Jump(2 * time.Minute) }) // the reply is read after a two-minute suspension
			}
		}})
		if lease, err := lt.take(c, name)(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("a try whose grant was read past its deadline: %v, %v; want ErrNotAcquired", lease, err)
		}
		expectNothingLeft(t, ctx, other, name, "after the try gave its grant back")
		copies.resend(t, ctx, other)
		expectNothingLeft(t, ctx, other, name, "after a late copy")
	})
}

// A Lock whose grant is read past its deadline (here after a suspension)
// gives the grant back and goes on waiting; its next attempt is granted
// and the lease returned. A copy of the give-back's release, sent again by
// go-redis after a read timeout, lands after that: it must not take away
// the hold the returned lease counts on, which another would then take
// (found by the explorer's overlap check, soak seed 1795708793282322346:
// a ReentrantMutex and an RWMutex's write side held at once, the first's
// renewal refused and its Unlock answered by the release's mark).
func TestLateRelease_OfAGrantGivenBackLeavesTheCallsNextHold(t *testing.T) {
	forEachLockType(t, func(t *testing.T, b backend, lt lockType) {
		ctx := ctxFor(t, 30*time.Second)
		name := lockName(t)
		other := b.newRedis(t)
		rdb := b.newRedis(t)
		releases := &copier{script: lt.release}
		rdb.AddHook(releases)
		c := newClient(t, rdb, dlock.WithTTL(time.Minute))
		clk := dlock.UseClock(c)
		var once sync.Once
		rdb.AddHook(&commandCounter{onReply: func(cmd redis.Cmder) {
			if isReplyOf(cmd, lt.acquire, 1) {
				once.Do(func() { clk.Jump(2 * time.Minute) }) // the first grant is read after a two-minute suspension
			}
		}})
		lease, err := lt.take(c, name)(ctx)
		if err != nil {
			t.Fatalf("a Lock whose first grant was read past its deadline: %v, want the next grant", err)
		}
		defer func() { _ = lease.Unlock(ctx) }()
		givenBack := releases.sent()
		if len(givenBack) != 1 {
			t.Fatalf("%d releases sent before the lease was returned, want 1: the first grant's give-back", len(givenBack))
		}
		if err := other.Do(ctx, givenBack[0]...).Err(); err != nil { // the give-back's late copy
			t.Fatalf("late copy of the give-back: %v", err)
		}
		if err := lease.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("Extend of the returned lease after a late copy of its call's give-back: %v; its hold was taken away while it counted on it", err)
		}
	})
}
