//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/faults/linear"
	"github.com/dlockio/dlock/internal/redistest"
)

// Histories of dlock's locks, run on a standalone server and on a cluster,
// checked against the models of package linear; and the checker's own
// proof that it flags locks written wrongly.

// backend makes go-redis clients of one kind of deployment; each call is a
// separate client with its own connections, as separate processes would be.
// The servers are shared by the tests of this file and the next, and run
// without dlock's ACL user, as these tests inject no faults.
type backend struct {
	name     string
	newRedis func(t testing.TB) redis.UniversalClient
}

var (
	standaloneOnce sync.Once
	standalone     *redistest.Server
	clusterOnce    sync.Once
	cluster        *redistest.Cluster
)

var backends = []backend{
	{"standalone", func(t testing.TB) redis.UniversalClient {
		standaloneOnce.Do(func() { standalone = redistest.Start(shared) })
		rdb := redis.NewClient(&redis.Options{Addr: standalone.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}},
	{"cluster", func(t testing.TB) redis.UniversalClient {
		clusterOnce.Do(func() { cluster = redistest.StartCluster(shared) })
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}},
}

// forEachBackend runs f on a standalone server and on a 3-master cluster.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// runWorkers runs body for workers goroutines at once and fails the test
// with the errors they return. Each gets a context that fails its wait
// instead of hanging should the locks under test deadlock.
func runWorkers(t *testing.T, workers int, body func(ctx context.Context, worker int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for worker := range workers {
		wg.Go(func() {
			if err := body(ctxFor(t, 2*time.Minute), worker); err != nil {
				errs <- fmt.Errorf("worker %d: %w", worker, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// eventually polls cond until it holds, failing the test when ctx ends:
// here, a key's expiry, which only asking Redis shows.
func eventually(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not happen", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// resultOf is how the models read an error: refused, or of unknown effect.
func resultOf(err error, token uint64) linear.Result {
	switch {
	case err == nil:
		return linear.Result{OK: true, Token: token}
	case errors.Is(err, dlock.ErrNotAcquired), errors.Is(err, dlock.ErrNotHeld):
		return linear.Result{}
	}
	return linear.Result{Unknown: true}
}

// recordedMutex is a mutex as one owner uses it: dlock's, or a broken one
// for the checker to catch.
type recordedMutex interface {
	tryLock(ctx context.Context) (token uint64, err error)
	unlock(ctx context.Context) error
	extend(ctx context.Context, ttl time.Duration) error
}

// mutexRecorder runs calls on recordedMutexes and records them in h.
type mutexRecorder struct {
	h   linear.History
	ttl time.Duration // the TTL each acquisition and extension sets

	lateExtends atomic.Int64 // extensions refused
}

func (r *mutexRecorder) try(ctx context.Context, client int, owner string, m recordedMutex) bool {
	done := r.h.Call(client, linear.MutexOp{Op: linear.Acquire, Owner: owner, TTL: r.ttl})
	token, err := m.tryLock(ctx)
	done(resultOf(err, token))
	return err == nil
}

func (r *mutexRecorder) unlock(ctx context.Context, client int, owner string, m recordedMutex) {
	done := r.h.Call(client, linear.MutexOp{Op: linear.Release, Owner: owner})
	done(resultOf(m.unlock(ctx), 0))
}

func (r *mutexRecorder) extend(ctx context.Context, client int, owner string, m recordedMutex) {
	done := r.h.Call(client, linear.MutexOp{Op: linear.Extend, Owner: owner, TTL: r.ttl})
	err := m.extend(ctx, r.ttl)
	if errors.Is(err, dlock.ErrNotHeld) {
		r.lateExtends.Add(1)
	}
	done(resultOf(err, 0))
}

func (r *mutexRecorder) check(t *testing.T, want porcupine.CheckResult) {
	t.Helper()
	if got := r.h.Linearizable(linear.FencedMutexModel, time.Minute); got != want {
		t.Fatalf("%d operations: %v; want %v against the fenced mutex", r.h.Len(), got, want)
	}
}

// dlockMutex is a Mutex's TryLock and the calls on its last lease. pause,
// when set, runs inside the next unlock call, before it reaches Redis.
type dlockMutex struct {
	mu    *dlock.Mutex
	lease *dlock.Lease
	pause func()
}

func (d *dlockMutex) tryLock(ctx context.Context) (uint64, error) {
	l, err := d.mu.TryLock(ctx)
	if err != nil {
		return 0, err
	}
	d.lease = l
	return l.Token(), nil
}

func (d *dlockMutex) unlock(ctx context.Context) error {
	if d.pause != nil {
		d.pause()
	}
	if d.lease == nil { // its TryLock failed
		return dlock.ErrNotHeld
	}
	return d.lease.Unlock(ctx)
}

func (d *dlockMutex) extend(ctx context.Context, ttl time.Duration) error {
	return d.lease.Extend(ctx, ttl)
}

// flaw is a way a Redis lock is often written wrongly.
type flaw int

const (
	delUnchecked     flaw = iota // unlock: DEL, whoever holds the key
	getThenDel                   // unlock: GET, compare in Go, then DEL
	recreatingExtend             // extend: SET PX, whether the hold is there or not
)

// brokenMutex is a lock with one flaw; its other calls are right. pause,
// when set, runs inside unlock between the GET and the DEL of getThenDel,
// or before the release otherwise.
type brokenMutex struct {
	rdb        redis.UniversalClient
	key, owner string
	ttl        time.Duration
	flaw       flaw
	pause      func()
}

var compareAndDelete = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

func (b *brokenMutex) tryLock(ctx context.Context) (uint64, error) {
	ok, err := b.rdb.SetNX(ctx, b.key, b.owner, b.ttl).Result()
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, dlock.ErrNotAcquired
	}
	return b.rdb.Incr(ctx, b.key+":fence").Uint64()
}

func (b *brokenMutex) unlock(ctx context.Context) error {
	var n int64
	var err error
	switch b.flaw {
	case delUnchecked:
		b.runPause()
		n, err = b.rdb.Del(ctx, b.key).Result()
	case getThenDel:
		if v, _ := b.rdb.Get(ctx, b.key).Result(); v != b.owner {
			return dlock.ErrNotHeld
		}
		b.runPause()
		n, err = b.rdb.Del(ctx, b.key).Result()
	default:
		b.runPause()
		n, err = compareAndDelete.Run(ctx, b.rdb, []string{b.key}, b.owner).Int64()
	}
	if err == nil && n == 0 {
		err = dlock.ErrNotHeld
	}
	return err
}

func (b *brokenMutex) runPause() {
	if b.pause != nil {
		b.pause()
	}
}

func (b *brokenMutex) extend(ctx context.Context, ttl time.Duration) error {
	if b.flaw == recreatingExtend {
		return b.rdb.Set(ctx, b.key, b.owner, ttl).Err()
	}
	ok, err := b.rdb.SetXX(ctx, b.key, b.owner, ttl).Result() // right enough for one owner
	if err == nil && !ok {
		err = dlock.ErrNotHeld
	}
	return err
}

func TestMutex_HistoriesAreLinearizable(t *testing.T) {
	const clients, rounds = 6, 40
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		r := &mutexRecorder{ttl: time.Minute}
		runWorkers(t, clients, func(ctx context.Context, w int) error {
			m := &dlockMutex{mu: newClient(t, b.newRedis(t), dlock.WithTTL(r.ttl)).Mutex(name)}
			owner := fmt.Sprint("client-", w)
			for round := range rounds {
				if !r.try(ctx, w, owner, m) {
					continue
				}
				r.unlock(ctx, w, owner, m)
				if round%4 == w%4 { // now and then a second Unlock: refused, and harmless
					r.unlock(ctx, w, owner, m)
				}
			}
			return nil
		})
		r.check(t, porcupine.Ok)
	})
}

// Holds that outlive their fixed lease: the lock passes on at the TTL, and
// the late holder's Extend and Unlock are refused, never honoured.
func TestMutex_HistoriesWithExpiryAreLinearizable(t *testing.T) {
	const clients, rounds = 4, 24
	const ttl = 150 * time.Millisecond
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		r := &mutexRecorder{ttl: ttl}
		runWorkers(t, clients, func(ctx context.Context, w int) error {
			m := &dlockMutex{mu: newClient(t, b.newRedis(t), dlock.WithLeaseTime(ttl)).Mutex(name)}
			owner := fmt.Sprint("client-", w)
			for round := range rounds {
				if !r.try(ctx, w, owner, m) {
					continue
				}
				if round%3 == 0 {
					r.extend(ctx, w, owner, m)
				}
				if round%4 == w%4 {
					time.Sleep(ttl + ttl/3) // the workload: a holder that overruns its lease
					r.extend(ctx, w, owner, m)
				}
				r.unlock(ctx, w, owner, m)
			}
			return nil
		})
		if r.lateExtends.Load() == 0 {
			t.Fatal("no extension came after its hold expired: the history does not test expiry")
		}
		r.check(t, porcupine.Ok)
	})
}

// The checker proves itself on real Redis before any run counts: each
// schedule of calls is linearizable for dlock and flagged for a lock with
// the flaw it exercises.
func TestFencedMutexModel_FlagsBrokenLocks(t *testing.T) {
	// A fixed lease of 500 ms, not 100: a grant that comes back with less
	// than a third of its lease left, as on a loaded machine, is confirmed
	// first, and given back if the confirmation too comes back late.
	const ttl = 500 * time.Millisecond
	ctx := ctxFor(t, time.Minute)
	rdb := backends[0].newRedis(t)
	gone := func(key string) func() {
		return func() {
			eventually(t, ctx, key+" expiring", func() bool { return rdb.Exists(ctx, key).Val() == 0 })
		}
	}
	schedules := []struct {
		flaw flaw
		what string
		run  func(r *mutexRecorder, a, b, c recordedMutex, expire func())
	}{
		{delUnchecked, "a second unlock releases another's hold", func(r *mutexRecorder, a, b, c recordedMutex, _ func()) {
			r.try(ctx, 0, "a", a)
			r.unlock(ctx, 0, "a", a)
			r.try(ctx, 1, "b", b)
			r.unlock(ctx, 0, "a", a) // a's second unlock, while b holds
			cHolds := r.try(ctx, 2, "c", c)
			r.unlock(ctx, 1, "b", b)
			if cHolds {
				r.unlock(ctx, 2, "c", c)
			}
		}},
		{getThenDel, "a hold expires between the GET and the DEL", func(r *mutexRecorder, a, b, c recordedMutex, expire func()) {
			r.try(ctx, 0, "a", a)
			pause(a, func() { expire(); r.try(ctx, 1, "b", b) })
			r.unlock(ctx, 0, "a", a) // b takes over in the middle of it
			cHolds := r.try(ctx, 2, "c", c)
			r.unlock(ctx, 1, "b", b)
			if cHolds {
				r.unlock(ctx, 2, "c", c)
			}
		}},
		{recreatingExtend, "an extension after the hold expired", func(r *mutexRecorder, a, b, c recordedMutex, expire func()) {
			r.try(ctx, 0, "a", a)
			expire()
			r.try(ctx, 1, "b", b)
			r.unlock(ctx, 1, "b", b)
			r.extend(ctx, 0, "a", a)
			if r.try(ctx, 2, "c", c) {
				r.unlock(ctx, 2, "c", c)
			}
			r.unlock(ctx, 0, "a", a)
		}},
	}
	for _, s := range schedules {
		name := lockName(t)
		impls := []struct {
			what   string
			mutex  func(owner string) recordedMutex
			expire func()
			want   porcupine.CheckResult
		}{
			{"dlock", func(string) recordedMutex {
				return &dlockMutex{mu: newClient(t, rdb, dlock.WithLeaseTime(ttl)).Mutex(name)}
			}, gone(lockKey(name)), porcupine.Ok},
			{"broken", func(owner string) recordedMutex {
				return &brokenMutex{rdb: rdb, key: "broken:{" + name + "}", owner: owner, ttl: ttl, flaw: s.flaw}
			}, gone("broken:{" + name + "}"), porcupine.Illegal},
		}
		for _, impl := range impls {
			r := &mutexRecorder{ttl: ttl}
			s.run(r, impl.mutex("a"), impl.mutex("b"), impl.mutex("c"), impl.expire)
			if got := r.h.Linearizable(linear.FencedMutexModel, time.Minute); got != impl.want {
				t.Errorf("%s, %s: %v; want %v", s.what, impl.what, got, impl.want)
			}
		}
	}
}

// pause sets what m's next unlock does in the middle of its call.
func pause(m recordedMutex, f func()) {
	switch m := m.(type) {
	case *dlockMutex:
		m.pause = f
	case *brokenMutex:
		m.pause = f
	}
}
