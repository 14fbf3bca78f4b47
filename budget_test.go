package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/serverstats"
)

// Every lock pays for each Redis command its scripts run, on the one
// server all clients share: a change that adds one must change its budget
// here, a visible decision (issue 37). Counts are the server's (INFO
// commandstats), commands inside scripts included; timings belong in the
// benchmarks.

// commandsOf is how many commands the servers ran while f ran.
func commandsOf(t *testing.T, ctx context.Context, servers []*redistest.Server, f func()) int64 {
	t.Helper()
	count := func() int64 {
		var n int64
		for _, srv := range servers {
			c, err := serverstats.Commands(ctx, srv.Client())
			if err != nil {
				t.Fatal(err)
			}
			n += c
		}
		return n
	}
	before := count()
	f()
	return count() - before
}

func TestCommandBudget_UncontendedLockUnlock(t *testing.T) {
	types := []struct {
		name    string
		servers int
		budget  int64 // per lock+unlock, on all servers
		lock    func(c *dlock.Client, r *dlock.Redlock) func(context.Context) (*dlock.Lease, error)
	}{
		{"Mutex", 1, 13, func(c *dlock.Client, _ *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			return c.Mutex("budget").Lock
		}},
		{"ReentrantMutex", 1, 30, func(c *dlock.Client, _ *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			return c.ReentrantMutex("budget").Lock
		}},
		{"RWMutex read", 1, 31, func(c *dlock.Client, _ *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			return c.RWMutex("budget").RLock
		}},
		{"RWMutex write", 1, 30, func(c *dlock.Client, _ *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			return c.RWMutex("budget").Lock
		}},
		{"FairMutex", 1, 15, func(c *dlock.Client, _ *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			return c.FairMutex("budget").Lock
		}},
		// The last release deletes the number of permits (EXISTS, DEL);
		// the next grant sets it again.
		{"Semaphore", 1, 30, func(c *dlock.Client, _ *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			return c.Semaphore("budget", 4).Acquire
		}},
		{"MultiLock of 3", 1, 32, func(c *dlock.Client, _ *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			return c.MultiLock([]string{"budget:a", "budget:b", "budget:c"}).Lock
		}},
		{"Election", 1, 18, func(c *dlock.Client, _ *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			e := c.Election("budget")
			return func(ctx context.Context) (*dlock.Lease, error) { return e.Campaign(ctx, "me") }
		}},
		{"Redlock of 3", 3, 42, func(_ *dlock.Client, r *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			return r.Mutex("budget").Lock
		}},
	}
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			ctx := ctxFor(t, 30*time.Second)
			servers := redistest.StartMasters(t, typ.servers)
			var clients []redis.UniversalClient
			for _, srv := range servers {
				rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
				t.Cleanup(func() { _ = rdb.Close() })
				clients = append(clients, rdb)
			}
			var r *dlock.Redlock
			if len(clients) > 1 {
				r = dlock.NewRedlock(clients, dlock.WithRestartGuard(0)) // fresh servers
			}
			lock := typ.lock(newClient(t, clients[0]), r)
			pair := func() {
				lease, err := lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := lease.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			pair() // scripts loaded, connections made
			for range 3 {
				if n := commandsOf(t, ctx, servers, pair); n != typ.budget {
					t.Fatalf("an uncontended lock+unlock ran %d Redis commands; its budget is %d", n, typ.budget)
				}
			}
		})
	}
}

// A Mutex handed over: a holder takes the lock, a waiter's Lock is refused,
// then registers; the holder's release hands it the lock; the waiter
// unlocks. The count is of the whole story.
func TestCommandBudget_MutexHandOver(t *testing.T) {
	const budget = 36
	ctx := ctxFor(t, 30*time.Second)
	srv := redistest.Start(t)
	holder := newClient(t, redis.NewClient(&redis.Options{Addr: srv.Addr()})).Mutex("budget")
	waiterClient := newClient(t, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	attempts := countAttempts(waiterClient)
	waiter := waiterClient.Mutex("budget")
	handOver := func(round int64) {
		held, err := holder.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		registered := attempts.registeredReach(round)
		result := lockInBackground(ctx, waiter.Lock)
		<-registered
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-result; err != nil {
			t.Fatal(err)
		}
	}
	handOver(1) // scripts loaded, the waiter subscribed
	for round := int64(2); round <= 4; round++ {
		if n := commandsOf(t, ctx, []*redistest.Server{srv}, func() { handOver(round) }); n != budget {
			t.Fatalf("a hand-over ran %d Redis commands; its budget is %d", n, budget)
		}
	}
}

// An Extend, as each renewal: a Mutex hold taken without holder info
// reads none.
func TestCommandBudget_MutexExtend(t *testing.T) {
	const budget = 3
	ctx := ctxFor(t, 30*time.Second)
	srv := redistest.Start(t)
	lease, err := newClient(t, redis.NewClient(&redis.Options{Addr: srv.Addr()})).Mutex("budget").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	extend := func() {
		if err := lease.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	extend() // scripts loaded
	if n := commandsOf(t, ctx, []*redistest.Server{srv}, extend); n != budget {
		t.Fatalf("an Extend ran %d Redis commands; its budget is %d", n, budget)
	}
}
