//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// contendThrough runs workers on one lock through addr (each its own
// client), holding each acquisition for hold; a quarter of the way in, one
// more client takes the lock and holds it through fault (see holdThrough).
// It returns the contention's counts.
func contendThrough(t *testing.T, addr string, workers, per int, ttl, hold time.Duration, fault func()) (*holders, string) {
	ctx := ctxFor(t, 3*time.Minute)
	name := lockName(t)
	mutexes := make([]*dlock.Mutex, workers)
	for w := range mutexes {
		// A drift of 0.1 leaves the holder a tenth of the TTL to stop
		// after its lease reports the loss, on a loaded test machine.
		mutexes[w] = newClient(t, redisAt(t, addr), dlock.WithTTL(ttl), dlock.WithDriftFactor(0.1)).Mutex(name)
	}
	faulty := newClient(t, redisAt(t, addr), dlock.WithTTL(ttl), dlock.WithDriftFactor(0.1)).Mutex(name)
	var h holders
	h.runThrough(ctx, workers, per, hold, func(ctx context.Context, w int) (*dlock.Lease, error) {
		actx, cancel := context.WithTimeout(ctx, 3*ttl)
		defer cancel()
		return mutexes[w].Lock(actx)
	}, func() { holdThrough(t, ctx, &h, faulty, fault) })
	return &h, name
}

// holdThrough takes mu and holds it while fault runs, or until the lease
// reports its loss: then it leaves the critical section at once, as a
// holder must, and counts the loss.
func holdThrough(t *testing.T, ctx context.Context, h *holders, mu *dlock.Mutex, fault func()) {
	lease, err := mu.Lock(ctx)
	if err != nil {
		t.Errorf("the holder through the fault: %v", err)
		fault()
		return
	}
	const holder = -1
	h.res.Enter(holder, lease.Token(), time.Now())
	faulted := make(chan struct{})
	go func() {
		defer close(faulted)
		fault()
	}()
	select {
	case <-lease.Done():
		h.losses.Add(1)
	case <-faulted:
	}
	h.res.Exit(holder)
	<-faulted
	_ = lease.Unlock(ctx)
}

// (6) The server stalls past the TTL (CLIENT PAUSE, then SIGSTOP) while a
// client holds the lock. Pass: that lease reports its loss; no overlap,
// tokens in order; the lock is free at the end.
func TestScenario06_ServerStallPastTheTTL(t *testing.T) {
	const ttl = 500 * time.Millisecond
	workers, per := 4, sized(40, 1000)
	for _, stall := range []struct {
		what string
		do   func(srv *redistest.Server)
	}{
		{"CLIENT PAUSE", func(srv *redistest.Server) {
			if err := srv.Client().Do(context.Background(), "CLIENT", "PAUSE", (2 * ttl).Milliseconds(), "ALL").Err(); err != nil {
				t.Error(err)
			}
			<-time.After(2 * ttl)
		}},
		{"SIGSTOP", func(srv *redistest.Server) {
			srv.Pause()
			<-time.After(2 * ttl) // the fault: the server frozen past the TTL
			srv.Resume()
		}},
	} {
		srv := startServer(t)
		h, name := contendThrough(t, srv.Addr(), workers, per, ttl, 2*time.Millisecond, func() { stall.do(srv) })
		r := h.row(fmt.Sprintf("06 server stall of 2 TTLs: %s", stall.what))
		r.Orphans = orphans(ctxFor(t, time.Minute), srv.Client(), name, ttl)
		r.Note = h.failureNote()
		report(t, r)
		h.expectAll(t, workers*per)
		if r.Losses != 1 {
			t.Errorf("%s: %d losses reported; the holder through the stall must report its own", stall.what, r.Losses)
		}
	}
}

// (7) The server restarts under load: killed (SIGKILL) and started again
// with appendfsync always, and without persistence; and SCRIPT FLUSH
// under load. Pass with persistence or a flush: no overlap, tokens in
// order. Without persistence the server forgets every hold and the
// fencing counter: a new holder can enter beside one that still believes
// it holds, and tokens start again (a fenced resource refuses them). That
// is the documented failure mode; the row shows what happened.
func TestScenario07_RestartAndScriptFlush(t *testing.T) {
	const ttl = 500 * time.Millisecond
	workers, per := 4, sized(40, 1000)
	for _, tc := range []struct {
		what  string
		args  []string
		fault func(srv *redistest.Server)
		allow []string
	}{
		{"SIGKILL and restart, appendfsync always", []string{"--appendonly", "yes", "--appendfsync", "always"},
			restartAndWait(ttl), nil},
		{"SIGKILL and restart, no persistence", nil,
			restartAndWait(ttl), []string{"overlaps", "out of order"}},
		{"SCRIPT FLUSH, FUNCTION FLUSH every 50 ms", nil, func(srv *redistest.Server) { // a holder renews through it
			for range 10 {
				if err := errors.Join(srv.Client().ScriptFlush(context.Background()).Err(), srv.Client().FunctionFlush(context.Background()).Err()); err != nil {
					t.Error(err)
				}
				<-time.After(50 * time.Millisecond)
			}
		}, nil},
	} {
		srv := startServer(t, tc.args...)
		h, name := contendThrough(t, srv.Addr(), workers, per, ttl, 2*time.Millisecond, func() { tc.fault(srv) })
		r := h.row("07 " + tc.what)
		r.Orphans = orphans(ctxFor(t, time.Minute), srv.Client(), name, ttl)
		r.Note = h.failureNote()
		report(t, r, tc.allow...)
		h.expectAll(t, workers*per)
	}
}

// restartAndWait kills and restarts the server, then waits a TTL: the
// holder's renewals find the hold again (persistence) or find it gone.
func restartAndWait(ttl time.Duration) func(*redistest.Server) {
	return func(srv *redistest.Server) {
		srv.Restart()
		<-time.After(ttl)
	}
}
