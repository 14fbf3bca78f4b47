//go:build faults

package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/faults/linear"
)

// Histories of the lock types that count holds, checked against their
// models. TTLs outlast the runs: these models do not expire holds.

// acquireRecorded runs an acquisition and records it as input.
func acquireRecorded(ctx context.Context, h *linear.History, client int, input any, acquire func(context.Context) (*dlock.Lease, error)) *dlock.Lease {
	done := h.Call(client, input)
	lease, err := acquire(ctx)
	if err != nil {
		done(resultOf(err, 0))
		return nil
	}
	done(resultOf(nil, lease.Token()))
	return lease
}

// releaseRecorded unlocks lease and records it as input.
func releaseRecorded(ctx context.Context, h *linear.History, client int, input any, lease *dlock.Lease) {
	done := h.Call(client, input)
	done(resultOf(lease.Unlock(ctx), 0))
}

// holdOnce records one try and, if it acquired, the release (twice when
// twice: the second is refused, and harmless).
func holdOnce(ctx context.Context, h *linear.History, client int, twice bool,
	try func(context.Context) (*dlock.Lease, error), acquire, release any) {
	lease := acquireRecorded(ctx, h, client, acquire, try)
	if lease == nil {
		return
	}
	releaseRecorded(ctx, h, client, release, lease)
	if twice {
		releaseRecorded(ctx, h, client, release, lease)
	}
}

func checkHistory(t *testing.T, h *linear.History, model porcupine.NondeterministicModel) {
	t.Helper()
	if got := h.Linearizable(model, time.Minute); got != porcupine.Ok {
		t.Fatalf("%d operations: %v; want linearizable", h.Len(), got)
	}
}

func TestReentrantMutex_HistoriesAreLinearizable(t *testing.T) {
	const clients, rounds = 4, 30
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		var h linear.History
		runWorkers(t, clients, func(ctx context.Context, w int) error {
			m := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute)).ReentrantMutex(name)
			op := func(k linear.Kind, hold int) linear.ReentrantOp {
				return linear.ReentrantOp{Op: k, Owner: fmt.Sprint("worker ", w), Hold: hold}
			}
			for round := range rounds {
				var leases []*dlock.Lease
				// Each nested hold is taken with the context of the one before.
				holding := ctx
				for hold := range 1 + round%3 { // nested one to three deep
					lease := acquireRecorded(holding, &h, w, op(linear.Acquire, hold), m.TryLock)
					if lease == nil {
						break
					}
					leases = append(leases, lease)
					holding = lease.Context(holding)
				}
				for hold := len(leases) - 1; hold >= 0; hold-- {
					releaseRecorded(ctx, &h, w, op(linear.Release, hold), leases[hold])
					if hold > 0 && round%4 == w%4 { // a second Unlock of a nested hold
						releaseRecorded(ctx, &h, w, op(linear.Release, hold), leases[hold])
					}
				}
			}
			return nil
		})
		checkHistory(t, &h, linear.ReentrantMutexModel)
	})
}

func TestRWMutex_HistoriesAreLinearizable(t *testing.T) {
	const clients, rounds = 6, 30
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		var h linear.History
		runWorkers(t, clients, func(ctx context.Context, w int) error {
			rw := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute)).RWMutex(name)
			for round := range rounds {
				write := (round+w)%3 == 0
				try := rw.TryRLock
				if write {
					try = rw.TryLock
				}
				holdOnce(ctx, &h, w, round%5 == w%5, try,
					linear.RWOp{Op: linear.Acquire, Write: write, Client: w},
					linear.RWOp{Op: linear.Release, Write: write, Client: w})
			}
			return nil
		})
		checkHistory(t, &h, linear.RWMutexModel)
	})
}

func TestSemaphore_HistoriesAreLinearizable(t *testing.T) {
	const clients, rounds, permits = 6, 30, 2
	forEachBackend(t, func(t *testing.T, b backend) {
		name := lockName(t)
		var h linear.History
		runWorkers(t, clients, func(ctx context.Context, w int) error {
			sem := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute)).Semaphore(name, permits)
			for round := range rounds {
				holdOnce(ctx, &h, w, round%5 == w%5, sem.TryAcquire,
					linear.SemaphoreOp{Op: linear.Acquire, Client: w},
					linear.SemaphoreOp{Op: linear.Release, Client: w})
			}
			return nil
		})
		checkHistory(t, &h, linear.SemaphoreModel(permits))
	})
}
