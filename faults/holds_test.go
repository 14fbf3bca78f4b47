//go:build faults

package faults

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/check"
	"github.com/dlockio/dlock/internal/redistest"
)

// faultyLink is a server behind a proxy that adds 10 ± 5 ms to replies and
// drops them all for 100 ms in every 400.
func faultyLink(t *testing.T) (srv *redistest.Server, addr string) {
	srv = startServer(t)
	p := newProxy(t, srv.Addr())
	p.add(latency("downstream", 10, 5))
	t.Cleanup(p.flap(100*time.Millisecond, 300*time.Millisecond))
	return srv, p.Addr()
}

// (14) Reentrant holds under latency and dropped replies. Pass: no
// overlap, tokens in order, and every nested hold taken shares the outer
// hold's token.
func TestScenario14_ReentrantUnderFaults(t *testing.T) {
	const ttl = time.Second
	workers, per := 4, sized(30, 250)
	srv, addr := faultyLink(t)
	ctx := ctxFor(t, 3*time.Minute)
	name := lockName(t)
	var h holders
	var nested, mismatched atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := newClient(t, redisAt(t, addr), dlock.WithTTL(ttl), dlock.WithDriftFactor(0.1)).ReentrantMutex(name)
			for got := 0; got < per && ctx.Err() == nil; {
				actx, cancel := context.WithTimeout(ctx, 2*ttl)
				outer, err := m.Lock(actx)
				cancel()
				if err != nil {
					h.failed(err)
					continue
				}
				got++
				h.res.Enter(w, outer.Token(), time.Now())
				if inner, err := m.TryLock(outer.Context(ctx)); err == nil { // re-entry through the hold's context
					nested.Add(1)
					if inner.Token() != outer.Token() {
						mismatched.Add(1)
					}
					_ = inner.Unlock(ctx)
				}
				if outer.Err() != nil {
					h.losses.Add(1)
				}
				h.res.Exit(w)
				_ = outer.Unlock(ctx)
			}
		}()
	}
	wg.Wait()
	r := h.row("14 ReentrantMutex, latency and dropped replies")
	r.Orphans = orphans(ctx, srv.Client(), name, ttl)
	r.Note = fmt.Sprintf("%d nested holds, %d with another token; %s", nested.Load(), mismatched.Load(), h.failureNote())
	report(t, r)
	if mismatched.Load() > 0 {
		t.Error(r.Note)
	}
}

// (15) Read-write holds under latency and dropped replies: 2 writers and
// 4 readers. Pass: never a writer beside anyone, write tokens in order.
func TestScenario15_RWUnderFaults(t *testing.T) {
	const ttl = time.Second
	writers, readers, per := 2, 4, sized(30, 250)
	srv, addr := faultyLink(t)
	ctx := ctxFor(t, 3*time.Minute)
	name := lockName(t)
	var shared check.Shared
	var h holders
	var wg sync.WaitGroup
	for w := range writers + readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rw := newClient(t, redisAt(t, addr), dlock.WithTTL(ttl), dlock.WithDriftFactor(0.1)).RWMutex(name)
			write := w < writers
			for got := 0; got < per && ctx.Err() == nil; {
				lock := rw.RLock
				if write {
					lock = rw.Lock
				}
				asked := time.Now()
				actx, cancel := context.WithTimeout(ctx, 2*ttl)
				lease, err := lock(actx)
				cancel()
				if err != nil {
					h.failed(err)
					continue
				}
				got++
				if write {
					shared.EnterWrite(lease.Token(), asked)
				} else {
					shared.EnterRead(asked)
				}
				<-time.After(2 * time.Millisecond) // the workload: holding
				if lease.Err() != nil {
					h.losses.Add(1)
				}
				if write {
					shared.ExitWrite()
				} else {
					shared.ExitRead()
				}
				_ = lease.Unlock(ctx)
			}
		}()
	}
	wg.Wait()
	res := shared.Result()
	r := row{Scenario: "15 RWMutex, latency and dropped replies", Acquisitions: res.Reads + res.Writes,
		Overlaps: res.Conflicts, OutOfOrder: res.Stale, Losses: int(h.losses.Load())}
	r.Orphans = orphans(ctx, srv.Client(), name, ttl)
	r.Note = fmt.Sprintf("%d reads, %d writes; %s", res.Reads, res.Writes, h.failureNote())
	report(t, r)
}
