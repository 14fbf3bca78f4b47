package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// A graceful cluster failover drops a waiter's sharded subscription, and
// its registration lives on, copied to the new master: a release there
// hands the lock to it, and the word is lost. The waiter, woken by the
// drop, leaves the line and watches anew, giving the hold back: until
// then its call held the lock for no lease, and a TryLock was refused
// with no lease held. Its Observer hears of it, as of any grant given
// back (a WaitRetry with an error), so that a history of the locks (the
// explorer's) can count that hold (the explorer's soak, seed
// 1795742894877401398: a TryLock refused "while nothing was held").
func TestWaiter_HandOverLostInAFailoverIsReportedGivenBack(t *testing.T) {
	t.Parallel() // waits on its own cluster's failover, not on the CPU
	c := redistest.StartReplicatedCluster(t)
	ctx := ctxFor(t, time.Minute)
	name := lockName(t)

	registered := make(chan struct{}, 1)
	woken := make(chan struct{}, 1)
	goOn := make(chan struct{})
	givenBack := make(chan error, 8)
	obs := &dlock.Observer{Wait: func(_ context.Context, ev dlock.WaitEvent) {
		switch {
		case ev.Step == dlock.WaitRegistered:
			registered <- struct{}{}
		case ev.Step == dlock.WaitRetry && ev.Err == nil:
			// The failover's wake-up: the waiter stays here until the
			// holder has released, handing it the lock.
			select {
			case woken <- struct{}{}:
				<-goOn
			default:
			}
		case ev.Step == dlock.WaitRetry:
			givenBack <- ev.Err
		}
	}}
	// No waiter refresh or hold expiry comes in the test's time: the
	// failover is what wakes the waiter.
	const long = 30 * time.Second
	waiter := newClient(t, c.Client(), dlock.WithObserver(obs), dlock.WithWaiterRefresh(long/3))
	holder, err := newClient(t, c.Client()).Mutex(name, dlock.WithTTL(long)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lease *dlock.Lease
		err   error
	}
	done := make(chan result, 1)
	go func() {
		l, err := waiter.Mutex(name, dlock.WithTTL(long)).Lock(ctx)
		done <- result{l, err}
	}()
	waitDone(t, registered, 10*time.Second, "the waiter registering")

	rdb := c.Client()
	master, err := c.SlotOwner(ctx, dlock.ClusterSlot(name))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ManualFailOver(ctx, master, ""); err != nil {
		t.Fatal(err)
	}
	waitDone(t, woken, 10*time.Second, "the waiter woken by the failover")
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, rdb).Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock after the release handed the lock to the waiter: %v, want ErrNotAcquired", err)
	}
	close(goOn)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-givenBack:
		t.Logf("reported: %v", err)
	default:
		t.Fatal("the waiter gave back a lock handed to it, and its Observer heard of no grant given back")
	}
}
