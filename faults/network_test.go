//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/faults/linear"
)

// (1) Baseline: many separate clients on one lock, no faults. Pass: no
// overlap, tokens strictly increasing, the lock free at the end.
func TestScenario01_Baseline(t *testing.T) {
	clients, per := 32, sized(40, 2500)
	srv := startServer(t)
	ctx := ctxFor(t, 2*time.Minute)
	name := lockName(t)
	mutexes := make([]*dlock.Mutex, clients)
	for w := range mutexes {
		mutexes[w] = newClient(t, redisAt(t, srv.Addr())).Mutex(name)
	}
	var h holders
	h.run(ctx, clients, per, 0, func(ctx context.Context, w int) (*dlock.Lease, error) { return mutexes[w].Lock(ctx) })
	r := h.row("01 baseline: 32 clients, one lock")
	r.Orphans = orphans(ctx, srv.Client(), name, dlock.DefaultTTL)
	report(t, r)
	if r.Acquisitions != clients*per {
		t.Fatalf("%d acquisitions, want %d (%d failed)", r.Acquisitions, clients*per, h.failures.Load())
	}
}

// (2) The same through a slow, choppy network: 50 ± 25 ms each way and
// replies cut into packets of 2–14 bytes. Pass: no overlap, and every
// lease returned with validity left.
func TestScenario02_LatencyAndSlicedPackets(t *testing.T) {
	t.Parallel()
	clients, per := 8, sized(8, 40)
	srv := startServer(t)
	p := newProxy(t, srv.Addr())
	p.add(latency("upstream", 50, 25))
	p.add(latency("downstream", 50, 25))
	p.add(sliced("downstream"))
	ctx := ctxFor(t, 3*time.Minute)
	name := lockName(t)
	mutexes := make([]*dlock.Mutex, clients)
	for w := range mutexes {
		c := newClient(t, redisAt(t, p.Addr()), dlock.WithTTL(2*time.Second))
		mutexes[w] = c.Mutex(name)
	}
	var h holders
	h.run(ctx, clients, per, 5*time.Millisecond, func(ctx context.Context, w int) (*dlock.Lease, error) {
		return mutexes[w].Lock(ctx)
	})
	r := h.row("02 latency 50±25 ms both ways, sliced replies")
	r.Orphans = orphans(ctx, srv.Client(), name, 2*time.Second)
	report(t, r)
	h.expectAll(t, clients*per)
	if n := h.noValid.Load(); n > 0 {
		t.Errorf("%d leases returned with no validity left", n)
	}
}

// (3) Dropped replies and cancelled acquisitions. Every 300 ms the link
// drops every reply for 120 ms; callers give up after 250 ms or cancel
// their Lock; holders hold 10 ms and think 10 ms. Leases are fixed (no renewal) so that the history's holds
// expire where the model says. Pass: the history is linearizable against
// the fenced mutex with expiry (a failed attempt's hold may block others
// only until its TTL), and once the faults end the lock is free and the
// next client gets it at once.
func TestScenario03_DroppedRepliesAndCancelledAcquires(t *testing.T) {
	const ttl = 400 * time.Millisecond
	clients, rounds := 6, sized(25, 200)
	srv := startServer(t)
	p := newProxy(t, srv.Addr())
	ctx := ctxFor(t, 3*time.Minute)
	name := lockName(t)

	stopFlapping := p.flap(120*time.Millisecond, 180*time.Millisecond)

	var hist linear.History
	var h holders
	var unknown sync.Map
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mu := newClient(t, redisAt(t, p.Addr()), dlock.WithLeaseTime(ttl), dlock.WithDriftFactor(0.1)).Mutex(name)
			owner := fmt.Sprint("client-", w)
			for round := range rounds {
				done := hist.Call(w, linear.MutexOp{Op: linear.Acquire, Owner: owner, TTL: ttl})
				actx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
				var lease *dlock.Lease
				var err error
				if round%2 == 0 {
					lease, err = mu.TryLock(actx)
				} else {
					lease, err = mu.Lock(actx) // waits, and is cancelled by its deadline
				}
				cancel()
				if err != nil {
					// A refusal is a refusal only if the call was not cut
					// short: a cancelled Lock may have been granted the lock
					// and given it back.
					if errors.Is(err, dlock.ErrNotAcquired) && !errors.Is(err, context.DeadlineExceeded) {
						done(linear.Result{})
					} else {
						unknown.Store(w*rounds+round, err)
						done(linear.Result{Unknown: true})
					}
					continue
				}
				done(linear.Result{OK: true, Token: lease.Token()})
				h.res.Enter(w, lease.Token(), time.Now())
				<-time.After(10 * time.Millisecond) // the workload: holding
				h.res.Exit(w)
				done = hist.Call(w, linear.MutexOp{Op: linear.Release, Owner: owner})
				switch err := lease.Unlock(ctx); {
				case err == nil:
					done(linear.Result{OK: true})
				case errors.Is(err, dlock.ErrNotHeld):
					done(linear.Result{})
				default:
					done(linear.Result{Unknown: true})
				}
				<-time.After(10 * time.Millisecond) // the workload: thinking
			}
		}()
	}
	wg.Wait()
	stopFlapping()

	r := h.row("03 dropped replies, cancelled acquisitions")
	r.Orphans = orphans(ctx, srv.Client(), name, ttl)
	started := time.Now()
	next, err := newClient(t, redisAt(t, p.Addr())).Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("the next client after the faults: %v", err)
	}
	_ = next.Unlock(ctx)
	failed := 0
	unknown.Range(func(any, any) bool { failed++; return true })
	r.Note = fmt.Sprintf("%d of %d calls failed by the faults; linearizable; next client in %v", failed, hist.Len(), time.Since(started).Round(time.Millisecond))
	if got := hist.Linearizable(linear.FencedMutexModel, 2*time.Minute); got != porcupine.Ok {
		t.Errorf("history of %d operations: %v; want linearizable:\n%s", hist.Len(), got, hist.Explain(linear.FencedMutexModel))
		r.Note = fmt.Sprintf("NOT linearizable (%v)", got)
	}
	if failed == 0 {
		t.Error("no call failed: the faults did not bite")
	}
	report(t, r)
}

// (5) The watchdog keeps a lock ten times its TTL through 100 ± 50 ms of
// latency on replies; then its key is deleted behind its back. Pass: the
// lease held throughout, another client was refused, the loss is reported,
// and no renewal re-creates the key.
func TestScenario05_WatchdogUnderLatencyAndNoResurrection(t *testing.T) {
	const ttl = time.Second
	srv := startServer(t)
	p := newProxy(t, srv.Addr())
	p.add(latency("downstream", 100, 50))
	ctx := ctxFor(t, 2*time.Minute)
	name := lockName(t)
	// Replies take up to 150 ms, more on a loaded machine: a read timeout
	// of its own, so that only the latency is under test.
	holder := newClient(t, redisWithTimeout(t, p.Addr(), time.Second), dlock.WithTTL(ttl)).Mutex(name)
	other := newClient(t, srv.Client()).Mutex(name)

	lease, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := row{Scenario: "05 watchdog through 100±50 ms latency, key deleted"}
	res := &r
	for until := time.Now().Add(10 * ttl); time.Now().Before(until); {
		select {
		case <-lease.Done():
			t.Fatalf("lease lost after %v of renewals through latency: %v", time.Until(until), lease.Err())
		case <-time.After(ttl / 2):
		}
		if l, err := other.TryLock(ctx); err == nil {
			res.Overlaps++
			_ = l.Unlock(ctx)
		}
	}
	res.Acquisitions = 1
	res.Note = fmt.Sprintf("held %v on a %v TTL", 10*ttl, ttl)

	if err := srv.Client().Del(ctx, lockKey(name)).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
		res.Losses++
	case <-time.After(2 * ttl):
		t.Error("the lease did not report the deleted key")
	}
	// Renewals in flight when the key went, and any after, must not bring it
	// back: watch it for a whole TTL.
	for until := time.Now().Add(ttl); time.Now().Before(until); <-time.After(20 * time.Millisecond) {
		if n, _ := srv.Client().Exists(ctx, lockKey(name)).Result(); n != 0 {
			res.Resurrected = 1
			break
		}
	}
	report(t, r)
}
