package dlock_test

import (
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A FairMutex waiter whose TTL is shorter than the time since its last
// attempt (it waits behind a holder with a longer TTL, and retries every
// waiter refresh) is handed the lock at its turn. The hand-over's hold
// lasts its TTL from the release in Redis; the lease, knowing no better,
// counts it from the attempt. Such a grant is confirmed with an extension
// well within the hold: the waiter keeps its turn, rather than giving the
// lock back, to the next in line, as a grant read past its deadline.
func TestFairMutex_AHandOverPastTheLastAttemptsTTLKeepsTheTurn(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	b := backends[0]
	name := lockName(t)
	holder := newClient(t, b.newRedis(t)).FairMutex(name, dlock.WithTTL(5*time.Second))
	first := newClient(t, b.newRedis(t)).FairMutex(name, dlock.WithTTL(200*time.Millisecond), dlock.WithWaiterRefresh(5*time.Second))
	second := newClient(t, b.newRedis(t)).FairMutex(name, dlock.WithTTL(5*time.Second))

	held, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 2)
	wait := func(who string, m *dlock.FairMutex) {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Error(who, err)
			order <- who
			return
		}
		order <- who
		time.Sleep(50 * time.Millisecond)
		_ = l.Unlock(ctx)
	}
	go wait("first", first)
	time.Sleep(400 * time.Millisecond) // first waits, in line, past its TTL since its attempt
	go wait("second", second)
	time.Sleep(400 * time.Millisecond)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := <-order; got != "first" {
		t.Fatalf("%s took the lock first, want the first in line", got)
	}
	<-order
}
