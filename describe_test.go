package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
)

func TestClient_DescribeReportsEveryType(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		rdb := b.newRedis(t)
		c := newClient(t, rdb)
		ctx := ctxFor(t, 30*time.Second)

		free := lockName(t)
		if info, err := c.Describe(ctx, free); err != nil || info.Kind != "" || len(info.Holders) != 0 || info.TTL != 0 {
			t.Fatalf("a free lock: %+v, %v", info, err)
		}

		mutex := lockName(t)
		lease, err := c.Mutex(mutex).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Describe(ctx, mutex)
		if err != nil || info.Kind != observe.KindMutex || len(info.Holders) != 1 || info.Holders[0].Owner != "" ||
			info.TTL <= 0 || info.LastToken != lease.Token() {
			t.Fatalf("a held Mutex: %+v, %v", info, err)
		}

		rwName := lockName(t)
		writer := c.RWMutex(rwName, dlock.WithOwner("writer"))
		if _, err := writer.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		var lastRead *dlock.Lease
		for range 2 {
			if lastRead, err = writer.RLock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		info, err = c.Describe(ctx, rwName)
		want := []admin.Holder{{Owner: admin.OwnerHash("writer"), Write: true, Holds: 1}, {Owner: admin.OwnerHash("writer"), Holds: 2}}
		if err != nil || info.Kind != observe.KindRead || len(info.Holders) != 2 || info.Holders[0] != want[0] ||
			info.Holders[1] != want[1] || info.TTL <= 0 || info.LastToken != lastRead.Token() {
			t.Fatalf("a written and read RWMutex: %+v, %v; want holders %+v", info, err, want)
		}

		fair := lockName(t)
		fairLease, err := c.FairMutex(fair).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		info, err = c.Describe(ctx, fair)
		if err != nil || info.Kind != observe.KindMutex || len(info.Holders) != 1 || info.LastToken != fairLease.Token() {
			t.Fatalf("a held FairMutex: %+v, %v", info, err)
		}

		semName := lockName(t)
		sem := c.Semaphore(semName, 3)
		var permit *dlock.Lease
		for range 2 {
			if permit, err = sem.Acquire(ctx); err != nil {
				t.Fatal(err)
			}
		}
		info, err = c.Describe(ctx, semName)
		if err != nil || info.Kind != observe.KindSemaphore || len(info.Holders) != 1 || info.Holders[0].Holds != 2 ||
			info.Permits != 3 || info.TTL <= 0 || info.LastToken != permit.Token() {
			t.Fatalf("a Semaphore with 2 of 3 permits held: %+v, %v", info, err)
		}

		wrong := lockName(t)
		rdb.RPush(ctx, lockKey(wrong), "x")
		if _, err := c.Describe(ctx, wrong); !errors.Is(err, dlock.ErrWrongType) {
			t.Fatalf("a list: %v, want ErrWrongType", err)
		}
		if _, err := c.Describe(ctx, ""); !errors.Is(err, dlock.ErrInvalid) {
			t.Fatalf("empty name: %v, want ErrInvalid", err)
		}
	})
}

func TestClient_ForceUnlockEndsHoldsAndWakesWaiters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, 30*time.Second)
		// A holder whose lock would run out in 30 s, and a waiter that would
		// otherwise try again only then: only a wake-up gets it the lock
		// within the 10 s allowed.
		c := newClient(t, b.newRedis(t), dlock.WithTTL(30*time.Second))
		waiterRedis := b.newRedis(t)
		waiter := newClient(t, waiterRedis, dlock.WithWaiterRefresh(time.Hour), dlock.WithTTL(time.Hour))
		for _, kind := range []string{"Mutex", "RWMutex", "FairMutex", "Semaphore"} {
			name := lockName(t)
			lock, wait, acquire := c.Mutex(name).Lock, waiter.Mutex(name).Lock, scripts.MutexAcquire
			switch kind {
			case "RWMutex":
				lock, wait, acquire = c.RWMutex(name).Lock, waiter.RWMutex(name).Lock, scripts.RWAcquire
			case "FairMutex":
				lock, wait, acquire = c.FairMutex(name).Lock, waiter.FairMutex(name).Lock, scripts.FairAcquire
			case "Semaphore":
				lock, wait, acquire = c.Semaphore(name, 1).Acquire, waiter.Semaphore(name, 1).Acquire, scripts.SemAcquire
			}
			registered := countAttemptsOf(waiter, acquire).registeredReach(1)
			held, err := lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			type waited struct {
				lease *dlock.Lease
				err   error
			}
			result := make(chan waited, 1) // the goroutine never touches t: it may outlive a failed test
			go func() {
				l, err := wait(ctx)
				result <- waited{l, err}
			}()
			waitDone(t, registered, time.Minute, kind+": the waiter registering")
			if info, err := c.Describe(ctx, name); err != nil || info.WritersWaiting != 1 {
				t.Fatalf("%s: a registered waiter: %+v, %v", kind, info, err)
			}
			if removed, err := c.ForceUnlock(ctx, name); err != nil || !removed {
				t.Fatalf("%s: ForceUnlock: %v, %v", kind, removed, err)
			}
			select {
			case next := <-result:
				if next.err != nil {
					t.Fatalf("%s: the waiter: %v", kind, next.err)
				}
				if next.lease.Token() <= held.Token() {
					t.Fatalf("%s: the next holder's token is not above the removed one's %d", kind, held.Token())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: the waiter was not woken by the force unlock", kind)
			}
			// The holder finds out at its next renewal, or at once when it asks.
			if _, err := held.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("%s: the removed holder's TTL: %v, want ErrNotHeld", kind, err)
			}
			waitDone(t, held.Done(), lossGuard, kind+": the holder's loss")
			if !errors.Is(held.Err(), dlock.ErrLeaseLost) {
				t.Fatalf("%s: the holder ended with %v, want ErrLeaseLost", kind, held.Err())
			}
			if removed, err := c.ForceUnlock(ctx, lockName(t)); err != nil || removed {
				t.Fatalf("%s: ForceUnlock of a free lock: %v, %v", kind, removed, err)
			}
		}
	})
}

// Describe tells an Election's leadership (and its leader's value) and a
// FairMutex with a queue from a Mutex, by the keys beside the lock.
func TestClient_DescribeTellsAnElectionAndAQueuedFairMutex(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.Client())
	ctx := ctxFor(t, 30*time.Second)

	election := lockName(t)
	lead, err := c.Election(election).Campaign(ctx, "node-a:8080")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Describe(ctx, election)
	if err != nil || info.Kind != observe.KindElection || info.LeaderValue != "node-a:8080" || info.LastToken != lead.Token() {
		t.Fatalf("an Election with a leader: %+v, %v; want Type Election, its value", info, err)
	}
	if err := lead.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := c.Describe(ctx, election); err != nil || info.Kind != "" || info.LeaderValue != "" {
		t.Fatalf("an Election whose leader resigned: %+v, %v; want free", info, err)
	}

	fair := lockName(t)
	held, err := c.FairMutex(fair).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	queuer := newClient(t, srv.Client())
	attempts := countAttemptsOf(queuer, scripts.FairAcquire)
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiting := make(chan error, 1)
	go func() {
		_, err := queuer.FairMutex(fair).Lock(waitCtx)
		waiting <- err
	}()
	waitDone(t, attempts.registeredReach(1), 10*time.Second, "the waiter queueing")
	if info, err := c.Describe(ctx, fair); err != nil || info.Kind != observe.KindFair || info.WritersWaiting != 1 {
		t.Fatalf("a FairMutex with one queued: %+v, %v; want Type FairMutex, 1 waiting", info, err)
	}
	cancel()
	<-waiting
	_ = held.Unlock(ctx)
}

// A ReentrantMutex is the write side of the RWMutex of its name, the same
// lock in Redis; Describe says which of the two took the writer's latest
// hold: KindRead where reads are held too, KindWrite where the hold
// carries no mark (as one an older dlock took).
func TestClient_DescribeTellsAReentrantMutexFromAnRWMutex(t *testing.T) {
	rdb, c, ctx, name := inspecting(t)
	expect := func(what string, want observe.Kind) admin.LockInfo {
		t.Helper()
		info, err := c.Describe(ctx, name)
		if err != nil || info.Kind != want {
			t.Fatalf("%s: Kind %q, %v; want %q", what, info.Kind, err, want)
		}
		return info
	}
	reentrant, err := c.ReentrantMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expect("a ReentrantMutex's hold", observe.KindReentrant)
	held := reentrant.Context(ctx) // its owner's calls re-enter
	again, err := c.ReentrantMutex(name).Lock(held)
	if err != nil {
		t.Fatal(err)
	}
	expect("re-entered", observe.KindReentrant)
	read, err := c.RWMutex(name).RLock(held)
	if err != nil {
		t.Fatal(err)
	}
	expect("its owner reading too, through an RWMutex", observe.KindRead)
	if err := read.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	expect("the read released", observe.KindReentrant)
	write, err := c.RWMutex(name).Lock(held)
	if err != nil {
		t.Fatal(err)
	}
	expect("its owner writing through an RWMutex", observe.KindWrite)
	for _, l := range []*dlock.Lease{write, again, reentrant} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	expect("released", "")

	w, err := c.RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expect("an RWMutex's write hold", observe.KindWrite)
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// An older dlock's hold has no mark: an RWMutex's, as far as it shows.
	if _, err := c.ReentrantMutex(name, dlock.WithOwner("older")).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	expect("a ReentrantMutex's hold", observe.KindReentrant)
	if err := rdb.HDel(ctx, lockKey(name), "awolder").Err(); err != nil {
		t.Fatal(err)
	}
	expect("a hold without the mark", observe.KindWrite)
}

// A Mutex, a FairMutex and a MultiLock's lock of one name are one lock in
// Redis, as are a ReentrantMutex and an RWMutex's write side: each is
// refused (not a wrong type) while another of its group holds the name.
// Describe says KindMutex for the first three (see Kind: nothing that
// every hold of theirs has can carry the type), and tells the other two
// apart.
func TestClient_DescribeOfTypesThatAreOneLockInRedis(t *testing.T) {
	_, c, ctx, _ := inspecting(t)
	type lockOf func(name string) (*dlock.Lease, error)
	type member struct {
		name      string
		try       lockOf
		described observe.Kind
	}
	groups := [][]member{{
		{"Mutex", func(n string) (*dlock.Lease, error) { return c.Mutex(n).TryLock(ctx) }, observe.KindMutex},
		{"FairMutex", func(n string) (*dlock.Lease, error) { return c.FairMutex(n).TryLock(ctx) }, observe.KindMutex},
		{"MultiLock", func(n string) (*dlock.Lease, error) { return c.MultiLock([]string{n}).TryLock(ctx) }, observe.KindMutex},
	}, {
		{"ReentrantMutex", func(n string) (*dlock.Lease, error) { return c.ReentrantMutex(n).TryLock(ctx) }, observe.KindReentrant},
		{"RWMutex", func(n string) (*dlock.Lease, error) { return c.RWMutex(n).TryLock(ctx) }, observe.KindWrite},
	}}
	for _, group := range groups {
		for _, first := range group {
			for _, second := range group {
				if first.name == second.name {
					continue
				}
				name := lockName(t)
				held, err := first.try(name)
				if err != nil {
					t.Fatalf("%s: %v", first.name, err)
				}
				if info, err := c.Describe(ctx, name); err != nil || info.Kind != first.described {
					t.Errorf("%s held: Kind %q, %v; want %q", first.name, info.Kind, err, first.described)
				}
				if l, err := second.try(name); !errors.Is(err, dlock.ErrNotAcquired) {
					t.Errorf("%s while a %s holds the name: %v; want ErrNotAcquired", second.name, first.name, err)
					if err == nil {
						_ = l.Unlock(ctx)
					}
				}
				if err := held.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// An owner id is a capability: WithOwner(id) joins the holds of that
// owner, exclusive ones included, with their fencing token. Describe shows
// each holder's id in a form that never contains it and that joins
// nothing as an owner id, as a Mutex's owner token is not shown at all.
func TestClient_DescribeNeverShowsAnOwnerID(t *testing.T) {
	c := newClient(t, sharedStandalone().Client())
	ctx := ctxFor(t, 30*time.Second)
	for _, lock := range []struct {
		name string
		take func(name, owner string) (*dlock.Lease, error)
		join func(name, owner string) (*dlock.Lease, error)
	}{
		{"RWMutex", func(name, owner string) (*dlock.Lease, error) {
			return c.RWMutex(name, dlock.WithOwner(owner)).Lock(ctx)
		}, func(name, owner string) (*dlock.Lease, error) {
			return c.RWMutex(name, dlock.WithOwner(owner)).TryLock(ctx)
		}},
		{"ReentrantMutex", func(name, owner string) (*dlock.Lease, error) {
			return c.ReentrantMutex(name, dlock.WithOwner(owner)).Lock(ctx)
		}, func(name, owner string) (*dlock.Lease, error) {
			return c.ReentrantMutex(name, dlock.WithOwner(owner)).TryLock(ctx)
		}},
		{"RWMutex read", func(name, owner string) (*dlock.Lease, error) {
			return c.RWMutex(name, dlock.WithOwner(owner)).RLock(ctx)
		}, func(name, owner string) (*dlock.Lease, error) {
			return c.RWMutex(name, dlock.WithOwner(owner)).TryLock(ctx) // another owner may not write beside the reads
		}},
	} {
		t.Run(lock.name, func(t *testing.T) {
			name, owner := lockName(t), "deploy-job/"+lockName(t)
			if _, err := lock.take(name, owner); err != nil {
				t.Fatal(err)
			}
			info, err := c.Describe(ctx, name)
			if err != nil || len(info.Holders) != 1 {
				t.Fatalf("Describe: %+v, %v; want one holder", info, err)
			}
			if shown := fmt.Sprintf("%+v %#v", info, info); strings.Contains(shown, owner) {
				t.Fatalf("Describe shows the owner id %q: %s", owner, shown)
			}
			if got, want := info.Holders[0].Owner, admin.OwnerHash(owner); got != want || got == "" {
				t.Fatalf("holder shown as %q; want OwnerHash(id), %q", got, want)
			}
			if l, err := lock.join(name, info.Holders[0].Owner); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("WithOwner(what Describe shows): %v, %v; want ErrNotAcquired", l, err)
			}
		})
	}
}
