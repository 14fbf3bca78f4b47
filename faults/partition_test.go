//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// (3, continued) Asymmetric partitions: the holder's own link (a proxy of
// its own) loses one direction while another client, on a healthy link,
// waits. Replies lost: the holder hears nothing (not even a new
// connection's handshake), whatever of its renewals reaches Redis, and
// counts the lease lost at its deadline. Requests lost: the renewals never
// arrive and the hold expires, after the holder's deadline. Pass, both ways: the holder
// leaves before the other enters, the other gets the lock once the hold
// expires, and the holder's Unlock afterwards harms nothing.
func TestScenario03_AsymmetricPartitions(t *testing.T) {
	const ttl = 600 * time.Millisecond
	srv := startServer(t)
	ctx := ctxFor(t, time.Minute)
	for _, lost := range []string{"downstream", "upstream"} {
		name := lockName(t)
		link := newProxy(t, srv.Addr())
		holder := newClient(t, redisAt(t, link.Addr()), dlock.WithTTL(ttl), dlock.WithDriftFactor(0.1)).Mutex(name)
		waiter := newClient(t, redisAt(t, srv.Addr()), dlock.WithTTL(ttl)).Mutex(name)
		var h holders
		lease, err := holder.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h.res.Enter(0, lease.Token(), time.Now())
		link.add(dropped(lost))
		got := make(chan *dlock.Lease, 1)
		go func() {
			l, err := waiter.Lock(ctx)
			if err != nil {
				t.Error(err)
			}
			if l != nil {
				h.res.Enter(1, l.Token(), time.Now())
			}
			got <- l
		}()
		var lostAt time.Time
		select {
		case <-lease.Done():
			lostAt = time.Now()
			h.losses.Add(1)
		case <-time.After(3 * ttl):
			t.Fatalf("%s lost: the holder's lease did not end", lost)
		}
		h.res.Exit(0)
		other := <-got
		if other == nil {
			t.Fatal("the waiter got nothing")
		}
		handover := time.Since(lostAt)
		link.remove("timeout-" + lost)
		// A pooled connection the partition broke may fail the first
		// Unlock (the client has no retries; the Client's node check keeps
		// a second connection in the pool): a caller tries again.
		err = lease.Unlock(ctx)
		if errors.Is(err, dlock.ErrUnavailable) {
			err = lease.Unlock(ctx)
		}
		if !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s lost: the old holder's Unlock: %v; want ErrNotHeld", lost, err)
		}
		if _, err := other.TTL(ctx); err != nil {
			t.Errorf("%s lost: the new holder after the old one's Unlock: %v", lost, err)
		}
		h.res.Exit(1)
		_ = other.Unlock(ctx)
		r := h.row(fmt.Sprintf("03 asymmetric partition of the holder: %s lost", map[string]string{"downstream": "replies", "upstream": "requests"}[lost]))
		r.Note = fmt.Sprintf("the waiter held the lock %v after the holder's loss (TTL %v)", handover.Round(time.Millisecond), ttl)
		report(t, r)
	}
}

// (3, continued) Connections reset: every 250 ms the link closes every
// connection and refuses new ones for 50 ms, under contention. Pass: no
// overlap, tokens in order, no hold left behind.
func TestScenario03_ConnectionResets(t *testing.T) {
	const ttl = time.Second
	workers, per := 4, sized(40, 400)
	srv := startServer(t)
	link := newProxy(t, srv.Addr())
	ctx := ctxFor(t, 3*time.Minute)
	name := lockName(t)
	mutexes := make([]*dlock.Mutex, workers)
	for w := range mutexes {
		mutexes[w] = newClient(t, redisAt(t, link.Addr()), dlock.WithTTL(ttl), dlock.WithDriftFactor(0.1)).Mutex(name)
	}
	quit, stopped := make(chan struct{}), make(chan struct{})
	resets := 0
	go func() {
		defer close(stopped)
		for {
			select {
			case <-quit:
				return
			case <-time.After(200 * time.Millisecond):
			}
			link.cut()
			resets++
			<-time.After(50 * time.Millisecond)
			link.restore()
		}
	}()
	var h holders
	h.run(ctx, workers, per, 2*time.Millisecond, func(ctx context.Context, w int) (*dlock.Lease, error) {
		actx, cancel := context.WithTimeout(ctx, 2*ttl)
		defer cancel()
		return mutexes[w].Lock(actx)
	})
	close(quit)
	<-stopped
	r := h.row("03 connections reset every 250 ms")
	r.Orphans = orphans(ctx, srv.Client(), name, ttl)
	r.Note = fmt.Sprintf("%d resets; %s", resets, h.failureNote())
	report(t, r)
	h.expectAll(t, workers*per)
}
