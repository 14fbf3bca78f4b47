package dlock_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
)

// A Redlock attempt that won a majority, whose caller's context ended
// meanwhile, is given back (keep): TryLock and Lock return the context's
// error, and no lease. Where that give-back misses the node timeout (a
// starved client, a slow link), it is sent again in the background,
// bounded by CleanupTimeout, as a failed attempt's is: the masters that
// granted do not keep the hold, which nobody has, for its TTL, shutting
// everyone out of the lock that long. A give-back applied whose reply was
// lost is sent again harmlessly. Where the second one fails too, the hold
// is left to its TTL and the logger says so. Another owner's hold is never
// touched.
func TestRedlock_AGrantItsCallerNoLongerWaitsForIsGivenBackWhereTheReleaseMissesTheNodeTimeout(t *testing.T) {
	t.Parallel()
	const (
		ttl         = time.Minute      // far longer than the test: only a release ends the hold
		otherLease  = 10 * time.Minute // the other owner's, longer than the test's context
		nodeTimeout = time.Second      // generous: it times the held-back release, not the machine
	)
	tryLock := func(ctx context.Context, m *dlock.RedlockMutex) (*dlock.Lease, error) { return m.TryLock(ctx) }
	lock := func(ctx context.Context, m *dlock.RedlockMutex) (*dlock.Lease, error) { return m.Lock(ctx) }
	for _, tc := range []struct {
		what     string
		lock     func(context.Context, *dlock.RedlockMutex) (*dlock.Lease, error)
		n        int  // releases held back on each of the first two masters
		send     bool // held back after sending: applied, the reply lost
		released bool
	}{
		{"TryLock, the second release arrives", tryLock, 1, false, true},
		{"TryLock, the first release applied, its reply lost", tryLock, 1, true, true},
		{"Lock, the second release arrives", lock, 1, false, true},
		{"TryLock, no release arrives", tryLock, 2, false, false},
	} {
		t.Run(tc.what, func(t *testing.T) {
			t.Parallel()
			servers := redistest.StartMasters(t, 3)
			ctx := ctxFor(t, 2*time.Minute)
			name := lockName(t)

			// Another owner holds the lock on the third master only, so
			// that an attempt wins the first two, a majority. Its lease is
			// fixed, never renewed: its first renewal (at TTL/3), refused
			// by the two masters it lacks, would lose it, failing a
			// subtest that ran that long on a loaded machine.
			other, err := redlockOver(t, servers, dlock.WithLeaseTime(otherLease), dlock.WithNodeTimeout(nodeTimeout)).Mutex(name).TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = other.Unlock(context.Background()) })
			for _, srv := range servers[:2] {
				if err := srv.Client().Del(ctx, lockKey(name)).Err(); err != nil {
					t.Fatal(err)
				}
			}
			othersHold := servers[2].Client().Get(ctx, lockKey(name)).Val()

			callCtx, cancelCall := context.WithCancel(ctx)
			defer cancelCall()
			fenced := &cancelOnceFenced{cancel: cancelCall}
			fenced.left.Store(int32(len(servers)))
			hooks := make([]*holdBackReleases, 2)
			clients := hookedClients(t, ctx, servers, func(i int) []redis.Hook {
				if i >= len(hooks) {
					return []redis.Hook{fenced}
				}
				hooks[i] = &holdBackReleases{n: tc.n, send: tc.send, unlocks: true}
				return []redis.Hook{fenced, hooks[i]}
			})
			logs := &logRecorder{}
			rl := mustRedlock(t, clients, dlock.WithRestartGuard(0), dlock.WithTTL(ttl),
				dlock.WithNodeTimeout(nodeTimeout), dlock.WithLogger(slog.New(logs)))
			began := time.Now()
			lease, err := tc.lock(callCtx, rl.Mutex(name))
			took := time.Since(began)
			if lease != nil || !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("a call whose context ended once a majority granted returned %v, %v; want no lease, ErrNotAcquired and context.Canceled", lease, err)
			}
			if fenced.left.Load() != 0 {
				t.Fatalf("the call's context ended with %d masters not fenced: it won no majority (the test's premise)", fenced.left.Load())
			}
			if took >= dlock.CleanupTimeout {
				t.Errorf("the call took %v: it waited for its background release", took)
			}

			within, cancel := context.WithTimeout(ctx, dlock.CleanupTimeout+5*time.Second)
			defer cancel()
			// Each master held back gets the release again: the ones held
			// back after sending reached it, and one more, sent again.
			reached := 0
			if tc.send {
				reached = tc.n
			}
			if tc.released {
				reached++
			}
			if tc.released {
				// The first release applied empties the masters before the
				// one sent again leaves: wait for both.
				eventually(t, within, "the first two masters dropping the hold given back, and the release sent again, within CleanupTimeout", func() bool {
					return heldOn(t, ctx, servers[:2], name) == 0 && hooks[0].releasesSent() >= reached && hooks[1].releasesSent() >= reached
				})
			} else {
				eventually(t, within, "a warning that the hold given back is left to its TTL", func() bool {
					return leftToTTL(logs, name) > 0
				})
				if heldOn(t, ctx, servers[:2], name) != 2 {
					t.Error("a master dropped a hold no release reached")
				}
			}
			for i, hook := range hooks {
				if got := hook.releasesHeld(); got != hook.n {
					t.Errorf("%d releases held back on master %d; want %d (the test's premise)", got, i, hook.n)
				}
				if got := hook.releasesSent(); got < reached {
					t.Errorf("%d releases reached master %d; want at least %d: the release held back was not sent again", got, i, reached)
				}
			}
			if n := leftToTTL(logs, name); tc.released && n != 0 {
				t.Errorf("%d warnings about a hold left to its TTL that the second release cleared up", n)
			}
			if got := servers[2].Client().Get(ctx, lockKey(name)).Val(); got != othersHold || other.Err() != nil {
				t.Errorf("the other owner's hold was touched: its master holds %q, was %q; lease %v", got, othersHold, other.Err())
			}
		})
	}
}

// leftToTTL counts the warnings that something of the lock called name
// was left to expire with its TTL.
func leftToTTL(logs *logRecorder, name string) int {
	logs.mu.Lock()
	defer logs.mu.Unlock()
	n := 0
	for _, r := range logs.records {
		if r.Level != slog.LevelWarn || !strings.Contains(r.Message, "expires with its TTL") {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "lock" && a.Value.String() == name {
				n++
			}
			return true
		})
	}
	return n
}

// cancelOnceFenced cancels a call's context once every master answered
// its fencing token (RedlockFence): the attempt won, and its caller has
// gone by the time the lease would be returned.
type cancelOnceFenced struct {
	left   atomic.Int32
	cancel context.CancelFunc
}

func (c *cancelOnceFenced) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *cancelOnceFenced) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		c.fenced([]redis.Cmder{cmd}, err)
		return err
	}
}

func (c *cancelOnceFenced) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		c.fenced(cmds, nil)
		return err
	}
}

// fenced counts the fences among cmds that succeeded; err is a command
// alone's error (go-redis sets it on the command after the hook returns).
func (c *cancelOnceFenced) fenced(cmds []redis.Cmder, err error) {
	for _, cmd := range cmds {
		failed := cmd.Err()
		if len(cmds) == 1 && err != nil {
			failed = err
		}
		if failed == nil && runs(cmd, scripts.RedlockFence) && c.left.Add(-1) == 0 {
			c.cancel()
		}
	}
}

// An Unlock whose release misses the node timeout on a master (a minority)
// still succeeds, a majority having let go, and the release is sent there
// again in the background, bounded by CleanupTimeout, which Unlock does
// not wait for: the master does not keep the hold for its TTL, where one
// more master lost would shut everyone out of the lock that long. Where
// the second release fails too, the hold is left to its TTL there and the
// logger says so.
func TestRedlock_AnUnlocksReleaseThatMissesTheNodeTimeoutIsSentAgain(t *testing.T) {
	t.Parallel()
	const (
		ttl         = time.Minute // far longer than the test: only a release ends the hold
		nodeTimeout = time.Second // generous: it times the held-back release, not the machine
	)
	for _, tc := range []struct {
		what     string
		n        int // releases held back on the first master
		released bool
	}{
		{"the second release arrives", 1, true},
		{"no release arrives", 2, false},
	} {
		t.Run(tc.what, func(t *testing.T) {
			t.Parallel()
			servers := redistest.StartMasters(t, 3)
			ctx := ctxFor(t, 2*time.Minute)
			name := lockName(t)
			// The release sent again waits at the gate until Unlock has
			// returned: had Unlock waited for it, its context would have
			// ended by then.
			hook := &holdBackReleases{n: tc.n, unlocks: true, gate: make(chan struct{}), atGate: make(chan struct{}, 1)}
			clients := hookedClients(t, ctx, servers, func(i int) []redis.Hook {
				if i == 0 {
					return []redis.Hook{hook}
				}
				return nil
			})
			logs := &logRecorder{}
			rl := mustRedlock(t, clients, dlock.WithRestartGuard(0), dlock.WithTTL(ttl),
				dlock.WithNodeTimeout(nodeTimeout), dlock.WithLogger(slog.New(logs)))
			lease, err := rl.Mutex(name).TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n := heldOn(t, ctx, servers, name); n != 3 {
				t.Fatalf("held on %d of 3 masters; want 3 (the test's premise)", n)
			}
			began := time.Now()
			if err := lease.Unlock(ctx); err != nil {
				t.Fatalf("Unlock with a majority let go: %v", err)
			}
			if took := time.Since(began); took >= dlock.CleanupTimeout {
				t.Errorf("Unlock took %v: it waited for its background release", took)
			}
			if n := heldOn(t, ctx, servers[1:], name); n != 0 {
				t.Errorf("held on %d of the 2 masters that let go within the node timeout", n)
			}

			within, cancel := context.WithTimeout(ctx, dlock.CleanupTimeout+5*time.Second)
			defer cancel()
			if tc.released {
				select {
				case <-hook.atGate:
				case <-within.Done():
					t.Fatal("the release was not sent again to the master that missed the node timeout")
				}
				if n := hook.releasesCutShort(); n != 0 {
					t.Fatal("the release sent again had its context end before Unlock returned: Unlock waited for its background release")
				}
				close(hook.gate)
				eventually(t, within, "the first master dropping the released hold, within CleanupTimeout", func() bool {
					return heldOn(t, ctx, servers, name) == 0
				})
				if n := hook.releasesCutShort(); n != 0 {
					t.Errorf("%d releases sent again were cut short at the gate (the test's premise)", n)
				}
			} else {
				eventually(t, within, "a warning that the released hold is left to its TTL", func() bool {
					return leftToTTL(logs, name) > 0
				})
				if heldOn(t, ctx, servers[:1], name) != 1 {
					t.Error("the first master dropped a hold no release reached")
				}
			}
			if got := hook.releasesHeld(); got != tc.n {
				t.Errorf("%d releases held back; want %d (the test's premise)", got, tc.n)
			}
			if n := leftToTTL(logs, name); tc.released && n != 0 {
				t.Errorf("%d warnings about a hold left to its TTL that the second release cleared up", n)
			}
		})
	}
}

// A Redlock grant given up because its caller's context ended leaves the
// call's tombstone on every master, as a failed attempt's abandon does: a
// late copy of the attempt that was granted (the Redis client's, sent
// again after a read timeout) that arrives after the give-back takes
// nothing, where it would otherwise take the lock again for nobody, until
// its TTL.
func TestRedlock_AGrantItsCallerNoLongerWaitsForLeavesTheCallsTombstone(t *testing.T) {
	t.Parallel()
	const ttl = time.Minute // far longer than the test: only a release ends the hold
	servers := redistest.StartMasters(t, 3)
	ctx := ctxFor(t, time.Minute)
	name := lockName(t)

	callCtx, cancelCall := context.WithCancel(ctx)
	defer cancelCall()
	fenced := &cancelOnceFenced{cancel: cancelCall}
	fenced.left.Store(int32(len(servers)))
	grants := make([]*grantRecorder, len(servers))
	clients := hookedClients(t, ctx, servers, func(i int) []redis.Hook {
		grants[i] = &grantRecorder{}
		return []redis.Hook{fenced, grants[i]}
	})
	rl := mustRedlock(t, clients, dlock.WithRestartGuard(0), dlock.WithTTL(ttl), dlock.WithNodeTimeout(time.Second))
	lease, err := rl.Mutex(name).TryLock(callCtx)
	if lease != nil || !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("a call whose context ended once a majority granted returned %v, %v; want no lease, ErrNotAcquired and context.Canceled", lease, err)
	}
	if fenced.left.Load() != 0 {
		t.Fatalf("the call's context ended with %d masters not fenced: it won no majority (the test's premise)", fenced.left.Load())
	}
	if n := heldOn(t, ctx, servers, name); n != 0 {
		t.Fatalf("held on %d of 3 masters after the give-back; want 0 (the test's premise)", n)
	}
	for i, srv := range servers {
		args := grants[i].granted()
		if args == nil {
			t.Fatalf("no granted acquire recorded on master %d (the test's premise)", i)
		}
		// The same command, as a late copy of it would arrive.
		res, err := scripts.AcquireReply(srv.Client().Do(ctx, args...))
		if err != nil {
			t.Fatalf("master %d: the late copy of the granted acquire: %v", i, err)
		}
		if held := srv.Client().Get(ctx, lockKey(name)).Val(); held != "" || len(res) != 2 || res[0] != -1 {
			t.Errorf("master %d: a late copy of the granted acquire answered %v and left the lock held by %q; want [-1 0] (the call's tombstone) and the lock free", i, res, held)
		}
	}
}

// grantRecorder keeps the arguments of the last acquire (MutexAcquire)
// that a server granted, to send it again as a late copy would arrive.
type grantRecorder struct {
	mu   sync.Mutex
	args []any
}

// granted is the last granted acquire's command, nil if none.
func (g *grantRecorder) granted() []any {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.args
}

func (g *grantRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *grantRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		g.record([]redis.Cmder{cmd})
		return err
	}
}

func (g *grantRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		g.record(cmds)
		return err
	}
}

func (g *grantRecorder) record(cmds []redis.Cmder) {
	for _, cmd := range cmds {
		if isReplyOf(cmd, scripts.MutexAcquire, 1) {
			g.mu.Lock()
			g.args = slices.Clone(cmd.Args())
			g.mu.Unlock()
		}
	}
}

// While a master is down, each Unlock of a Redlock's lease logs that
// master's failure as a warning (its release sent again in the background
// fails too), as the godoc says, and Unlock still succeeds on the majority.
func TestRedlock_AnUnlockWithAMasterDownLogsIt(t *testing.T) {
	t.Parallel()
	servers := redistest.StartMasters(t, 3)
	ctx := ctxFor(t, time.Minute)
	name := lockName(t)
	down := servers[2]
	down.Kill()

	logs := &logRecorder{}
	clients := hookedClients(t, ctx, servers[:2], func(int) []redis.Hook { return nil })
	downClient := redis.NewClient(&redis.Options{Addr: down.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = downClient.Close() })
	rl := mustRedlock(t, append(clients, downClient), dlock.WithRestartGuard(0),
		dlock.WithNodeTimeout(time.Second), dlock.WithLogger(slog.New(logs)))
	lease, err := rl.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with 2 of 3 masters up: %v", err)
	}
	before := warningsNaming(logs, name, down.Addr())
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with 2 of 3 masters up: %v", err)
	}
	within, cancel := context.WithTimeout(ctx, dlock.CleanupTimeout+5*time.Second)
	defer cancel()
	eventually(t, within, "a warning naming the master that is down, after Unlock", func() bool {
		return warningsNaming(logs, name, down.Addr()) > before
	})
	if n := heldOn(t, ctx, servers[:2], name); n != 0 {
		t.Errorf("held on %d of the 2 masters up after Unlock; want 0", n)
	}
}

// warningsNaming counts the warnings about the lock called name whose
// error names the node at addr.
func warningsNaming(logs *logRecorder, name, addr string) int {
	logs.mu.Lock()
	defer logs.mu.Unlock()
	n := 0
	for _, r := range logs.records {
		if r.Level != slog.LevelWarn {
			continue
		}
		lock, node := false, false
		r.Attrs(func(a slog.Attr) bool {
			lock = lock || a.Key == "lock" && a.Value.String() == name
			node = node || a.Key == "err" && strings.Contains(a.Value.String(), addr)
			return true
		})
		if lock && node {
			n++
		}
	}
	return n
}
