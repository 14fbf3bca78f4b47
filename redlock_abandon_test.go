package dlock_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
)

// A failed Redlock attempt gives back what it won. Where that release
// misses the node timeout (a starved client, a slow link), it is sent
// again in the background, bounded by CleanupTimeout, as to the nodes that
// never answered the attempt: the node does not keep the failed attempt
// for its TTL, which would shut everyone out of the lock for that long.
// Where the second release misses too, the attempt is left to its TTL and
// the logger says so.
func TestRedlock_AFailedAttemptsReleaseThatMissesTheNodeTimeoutIsSentAgain(t *testing.T) {
	t.Parallel()
	const ttl = time.Minute // far longer than the test: only a release ends the hold
	for _, tc := range []struct {
		what     string
		stalls   int32 // releases of the failed attempt held back on the first master
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

			// Another owner holds the lock on the second and third masters
			// only, so that an attempt wins the first and fails.
			other, err := redlockOver(t, servers, dlock.WithTTL(ttl)).Mutex(name).TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = other.Unlock(context.Background()) })
			if err := servers[0].Client().Del(ctx, lockKey(name)).Err(); err != nil {
				t.Fatal(err)
			}

			stall := &stallReleases{n: tc.stalls}
			clients := make([]redis.UniversalClient, len(servers))
			for i, srv := range servers {
				rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
				if i == 0 {
					rdb.AddHook(stall)
				}
				t.Cleanup(func() { _ = rdb.Close() })
				clients[i] = rdb
			}
			logs := &logRecorder{}
			rl := dlock.NewRedlock(clients, dlock.WithRestartGuard(0), dlock.WithTTL(ttl),
				dlock.WithNodeTimeout(100*time.Millisecond), dlock.WithLogger(slog.New(logs)))
			if _, err := rl.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryLock held by another owner on 2 of 3 masters: %v; want ErrNotAcquired", err)
			}
			within, cancel := context.WithTimeout(ctx, dlock.CleanupTimeout+5*time.Second)
			defer cancel()
			if tc.released {
				eventually(t, within, "the first master dropping the failed attempt, within CleanupTimeout", func() bool {
					return heldOn(t, ctx, servers[:1], name) == 0
				})
			} else {
				eventually(t, within, "a warning that the failed attempt is left to its TTL", func() bool {
					return logs.warnings(name) > 0
				})
				if heldOn(t, ctx, servers[:1], name) != 1 {
					t.Error("the first master dropped an attempt no release reached")
				}
			}
			if got := stall.stalled.Load(); got != tc.stalls {
				t.Errorf("%d releases held back; want %d (the test's premise)", got, tc.stalls)
			}
			if n := logs.warnings(name); tc.released && n != 0 {
				t.Errorf("%d warnings about a failed attempt the second release cleared up", n)
			}
		})
	}
}

// stallReleases holds back the first n releases of a failed attempt
// (MutexAbandon) until their context ends, unsent, as a starved client's
// commands would miss their deadline; every other command passes.
type stallReleases struct {
	n       int32
	stalled atomic.Int32
}

func (h *stallReleases) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *stallReleases) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.stall([]redis.Cmder{cmd}) {
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *stallReleases) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.stall(cmds) {
			<-ctx.Done()
			for _, cmd := range cmds {
				cmd.SetErr(ctx.Err())
			}
			return ctx.Err()
		}
		return next(ctx, cmds)
	}
}

// stall reports whether cmds carry a release to hold back, counting it.
func (h *stallReleases) stall(cmds []redis.Cmder) bool {
	release := slices.ContainsFunc(cmds, func(cmd redis.Cmder) bool {
		args := cmd.Args()
		return len(args) > 1 && args[1] == scripts.MutexAbandon.Hash()
	})
	if !release {
		return false
	}
	for {
		n := h.stalled.Load()
		if n >= h.n {
			return false
		}
		if h.stalled.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// warnings counts the warnings logged about the lock called name.
func (h *logRecorder) warnings(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.records {
		r.Attrs(func(a slog.Attr) bool {
			if r.Level == slog.LevelWarn && a.Key == "lock" && a.Value.String() == name {
				n++
			}
			return true
		})
	}
	return n
}
