package dlock_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
)

// A Redlock attempt that wins no majority gives back what it won. Where
// that release fails (a starved client, a slow link: it missed the node
// timeout), it is sent again in the background, bounded by CleanupTimeout,
// as to the nodes that never answered the attempt, while TryLock returns
// within the node timeout: the node does not keep the failed attempt for
// its TTL, which would shut everyone out of the lock for that long. A
// release applied whose reply was lost is sent again harmlessly. Where the
// second release fails too, the attempt is left to its TTL and the logger
// says so. No other owner's hold is touched.
func TestRedlock_AFailedAttemptsReleaseThatMissesTheNodeTimeoutIsSentAgain(t *testing.T) {
	t.Parallel()
	const (
		ttl         = time.Minute // far longer than the test: only a release ends the hold
		nodeTimeout = time.Second // generous: it times the held-back release, not the machine
	)
	for _, tc := range []struct {
		what     string
		hook     *holdBackReleases // on the first master
		released bool
	}{
		{"the second release arrives", &holdBackReleases{n: 1}, true},
		{"the first release applied, its reply lost", &holdBackReleases{n: 1, send: true}, true},
		{"no release arrives", &holdBackReleases{n: 2}, false},
	} {
		t.Run(tc.what, func(t *testing.T) {
			t.Parallel()
			servers := redistest.StartMasters(t, 3)
			ctx := ctxFor(t, 2*time.Minute)
			name := lockName(t)

			// Another owner holds the lock on the second and third masters
			// only, so that an attempt wins the first and fails.
			other, err := redlockOver(t, servers, dlock.WithTTL(ttl), dlock.WithNodeTimeout(nodeTimeout)).Mutex(name).TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = other.Unlock(context.Background()) })
			if err := servers[0].Client().Del(ctx, lockKey(name)).Err(); err != nil {
				t.Fatal(err)
			}

			hook := tc.hook
			clients := hookedClients(t, ctx, servers, func(i int) []redis.Hook {
				if i == 0 {
					return []redis.Hook{hook}
				}
				return nil
			})
			logs := &logRecorder{}
			rl := mustRedlock(t, clients, dlock.WithRestartGuard(0), dlock.WithTTL(ttl),
				dlock.WithNodeTimeout(nodeTimeout), dlock.WithLogger(slog.New(logs)))
			began := time.Now()
			_, err = rl.Mutex(name).TryLock(ctx)
			took := time.Since(began)
			var quorum *dlock.QuorumError
			if !errors.Is(err, dlock.ErrNotAcquired) || !errors.As(err, &quorum) || quorum.Granted != 1 ||
				slices.ContainsFunc(quorum.Nodes, func(n *dlock.NodeError) bool { return n.Node == 0 }) {
				t.Fatalf("TryLock held by another owner on 2 of 3 masters: %v; want ErrNotAcquired, granted by the first master only (the test's premise)", err)
			}
			if took >= dlock.CleanupTimeout {
				t.Errorf("the failed TryLock took %v: it waited for its background release", took)
			}

			reached := 0 // the ones held back after sending, and one sent again
			if hook.send {
				reached = hook.n
			}
			if tc.released {
				reached++
			}
			within, cancel := context.WithTimeout(ctx, dlock.CleanupTimeout+5*time.Second)
			defer cancel()
			if tc.released {
				// Both: a release applied whose reply was lost drops the
				// hold before the one sent again is on its way.
				eventually(t, within, "the first master dropping the failed attempt, and the release sent again, within CleanupTimeout", func() bool {
					return heldOn(t, ctx, servers[:1], name) == 0 && hook.releasesSent() >= reached
				})
			} else {
				eventually(t, within, "a warning that the failed attempt is left to its TTL", func() bool {
					return logs.warnings(name) > 0
				})
				if heldOn(t, ctx, servers[:1], name) != 1 {
					t.Error("the first master dropped an attempt no release reached")
				}
			}
			if got := hook.releasesHeld(); got != hook.n {
				t.Errorf("%d releases held back; want %d (the test's premise)", got, hook.n)
			}
			if got := hook.releasesSent(); got < reached {
				t.Errorf("%d releases reached the first master; want at least %d: the release held back was not sent again", got, reached)
			}
			if n := logs.warnings(name); tc.released && n != 0 {
				t.Errorf("%d warnings about a failed attempt the second release cleared up", n)
			}
			if heldOn(t, ctx, servers[1:], name) != 2 || other.Err() != nil {
				t.Errorf("the other owner's hold was touched: held on %d of its 2 masters, lease %v", heldOn(t, ctx, servers[1:], name), other.Err())
			}
		})
	}
}

// holdBackReleases holds back the first n releases of a failed attempt
// (MutexAbandon), and with unlocks a lease's too (MutexRelease), until
// their context ends, as a starved client's commands would miss their
// deadline: unsent, or with send, sent and their reply lost. With a gate,
// the releases after those wait for it to close (or their context to end)
// before they are sent, each saying so on atGate once it waits. Every
// other command passes.
type holdBackReleases struct {
	n       int
	send    bool
	unlocks bool
	gate    chan struct{}
	atGate  chan struct{} // buffered, with gate: a release waits there

	mu    sync.Mutex
	held  int
	sent  int               // releases that reached the server
	gated []context.Context // of the releases at the gate; nil once through
}

// releasesHeld is how many releases h held back.
func (h *holdBackReleases) releasesHeld() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

// releasesSent is how many releases reached the server, held back after
// sending (send) or not.
func (h *holdBackReleases) releasesSent() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent
}

// releasesCutShort is how many releases at the gate had their context
// end before it opened: their call's bound ran out, or the call returned.
func (h *holdBackReleases) releasesCutShort() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, ctx := range h.gated {
		if ctx != nil && ctx.Err() != nil {
			n++
		}
	}
	return n
}

func (h *holdBackReleases) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdBackReleases) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.process(ctx, []redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (h *holdBackReleases) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.process(ctx, cmds, func() error { return next(ctx, cmds) })
	}
}

// process sends cmds, or, when they carry a release to hold back, sends
// them only with send and answers each with its context's end; a release
// not held back waits at the gate first, if any.
func (h *holdBackReleases) process(ctx context.Context, cmds []redis.Cmder, sendOn func() error) error {
	release, hold := h.holdBack(cmds)
	switch {
	case !release:
		return sendOn()
	case !hold && h.gate != nil:
		h.mu.Lock()
		at := len(h.gated)
		h.gated = append(h.gated, ctx)
		h.mu.Unlock()
		select {
		case h.atGate <- struct{}{}:
		default:
		}
		select {
		case <-h.gate:
		case <-ctx.Done():
			return answerEnded(ctx, cmds)
		}
		h.mu.Lock()
		h.gated[at] = nil
		h.mu.Unlock()
		fallthrough
	case !hold:
		h.count(&h.sent)
		return sendOn()
	}
	if h.send {
		h.count(&h.sent)
		_ = sendOn()
	}
	<-ctx.Done()
	return answerEnded(ctx, cmds)
}

// answerEnded answers cmds with ctx's end.
func answerEnded(ctx context.Context, cmds []redis.Cmder) error {
	for _, cmd := range cmds {
		cmd.SetErr(ctx.Err())
	}
	return ctx.Err()
}

func (h *holdBackReleases) count(n *int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*n++
}

// holdBack reports whether cmds carry a release, and whether to hold it
// back, counting it.
func (h *holdBackReleases) holdBack(cmds []redis.Cmder) (release, hold bool) {
	release = slices.ContainsFunc(cmds, func(cmd redis.Cmder) bool {
		return runs(cmd, scripts.MutexAbandon) || h.unlocks && runs(cmd, scripts.MutexRelease)
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if !release || h.held >= h.n {
		return release, false
	}
	h.held++
	return true, true
}
