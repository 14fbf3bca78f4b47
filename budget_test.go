package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
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
		{"Mutex", 1, 11, func(c *dlock.Client, _ *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			return c.Mutex("budget").Lock
		}},
		{"ReentrantMutex", 1, 16, func(c *dlock.Client, _ *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			return c.ReentrantMutex("budget").Lock
		}},
		{"RWMutex read", 1, 16, func(c *dlock.Client, _ *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			return c.RWMutex("budget").RLock
		}},
		{"RWMutex write", 1, 16, func(c *dlock.Client, _ *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			return c.RWMutex("budget").Lock
		}},
		{"FairMutex", 1, 11, func(c *dlock.Client, _ *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			return c.FairMutex("budget").Lock
		}},
		// The last release deletes the number of permits and the tokens
		// in the DEL of the holders; the next grant sets them again.
		{"Semaphore", 1, 17, func(c *dlock.Client, _ *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			return c.Semaphore("budget", 4).Acquire
		}},
		// An acquire reads the counters in one MGET and counts the keys
		// beside them in one EXISTS; a release reads the locks and the
		// counters in one MGET.
		{"MultiLock of 3", 1, 15, func(c *dlock.Client, _ *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			return c.MultiLock([]string{"budget:a", "budget:b", "budget:c"}).Lock
		}},
		{"Election", 1, 14, func(c *dlock.Client, _ *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
			e := c.Election("budget")
			return func(ctx context.Context) (*dlock.Lease, error) { return e.Campaign(ctx, "me") }
		}},
		{"Redlock of 3", 3, 39, func(_ *dlock.Client, r *dlock.Redlock) func(context.Context) (*dlock.Lease, error) {
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
				r = mustRedlock(t, clients, dlock.WithRestartGuard(0)) // fresh servers
			}
			lock := typ.lock(newClient(t, clients[0]), r)
			pair := func() { lockUnlock(t, ctx, lock) }
			pair() // scripts loaded, connections made
			for range 3 {
				if len(servers) > 1 {
					if n := commandsOf(t, ctx, servers, pair); n != typ.budget {
						t.Fatalf("an uncontended lock+unlock ran %d Redis commands; its budget is %d", n, typ.budget)
					}
					continue
				}
				calls := callsOf(t, ctx, servers[0], pair)
				if n := sum(calls); n != typ.budget {
					t.Fatalf("an uncontended lock+unlock ran %d Redis commands (%v); its budget is %d", n, calls, typ.budget)
				}
				t.Logf("%v", calls)
			}
		})
	}
}

// A Mutex handed over: a holder takes the lock, a waiter's Lock is refused,
// then registers; the holder's release hands it the lock; the waiter
// unlocks. The count is of the whole story.
func TestCommandBudget_MutexHandOver(t *testing.T) {
	const budget = 28
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

// A Mutex under contention, one key: each release hands the lock to the
// first registered waiter, and the releaser, locking again, is refused and
// registers behind the others. A turn is what each acquisition costs when
// clients take the lock back to back (dlock bench --type Mutex, issue 37):
// the holder's Unlock that hands over, and its next Lock until it waits.
// Three contenders, so that a registration finds others waiting, as in the
// bench; the waiters refresh less often than the test runs, so every count
// is exact. The other types wake a waiter rather than hand it the lock, and
// an RWMutex (a ReentrantMutex) wakes the writer whose registration runs out
// first, counted in whole ms: not always the first registered.
func TestCommandBudget_Contended(t *testing.T) {
	for _, typ := range []struct {
		name   string
		budget int64
		script *redis.Script // the acquire whose registrations the test waits for
		lock   func(c *dlock.Client) func(context.Context) (*dlock.Lease, error)
	}{
		{"Mutex", 15, scripts.MutexAcquire, func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) {
			return c.Mutex("budget").Lock
		}},
		{"FairMutex", 23, scripts.FairAcquire, func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) {
			return c.FairMutex("budget").Lock
		}},
		{"Semaphore of 1", 35, scripts.SemAcquire, func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) {
			return c.Semaphore("budget", 1).Acquire
		}},
		{"RWMutex write", 54, scripts.RWAcquire, func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) {
			return c.RWMutex("budget").Lock
		}},
		{"ReentrantMutex", 54, scripts.RWAcquire, func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) {
			return c.ReentrantMutex("budget").Lock
		}},
		// A group of one name: every group of a Cluster whose names hash
		// to different slots.
		{"MultiLock of 1", 32, scripts.MultiAcquire, func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) {
			return c.MultiLock([]string{"budget"}).Lock
		}},
	} {
		t.Run(typ.name, func(t *testing.T) {
			contended(t, typ.budget, typ.script, typ.lock)
		})
	}
}

// contended counts the commands of a turn of three contenders (see
// TestCommandBudget_Contended) taking lock's lock.
func contended(t *testing.T, budget int64, script *redis.Script, lockOf func(c *dlock.Client) func(context.Context) (*dlock.Lease, error)) {
	ctx := ctxFor(t, 30*time.Second)
	srv := redistest.Start(t)
	type contender struct {
		lock     func(context.Context) (*dlock.Lease, error)
		attempts *attemptCounter
		lease    chan *dlock.Lease
	}
	// lock starts c's Lock, and returns once it waits, registered; a Lock
	// that returns first (granted, or failed) fails the test rather than
	// leaving it waiting for a registration that will not come.
	lock := func(c *contender) {
		registered := c.attempts.registeredReach(c.attempts.registered.Load() + 1)
		returned := make(chan struct{})
		go func() {
			defer close(returned)
			lease, err := c.lock(ctx)
			if err != nil {
				t.Error(err)
			}
			c.lease <- lease
		}()
		select {
		case <-registered:
		case <-returned:
			t.Fatalf("a Lock returned (%d granted, %d refused, %d registered) before it waited", c.attempts.acquired.Load(), c.attempts.refused.Load(), c.attempts.registered.Load())
		}
	}
	var queue []*contender // the holder, then its waiters in the order they registered
	for range 3 {
		client := newClient(t, redis.NewClient(&redis.Options{Addr: srv.Addr()}), dlock.WithWaiterRefresh(time.Minute))
		queue = append(queue, &contender{attempts: countAttemptsOf(client, script), lock: lockOf(client), lease: make(chan *dlock.Lease, 1)})
	}
	held, err := queue[0].lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range queue[1:] {
		lock(c) // subscribes, then registers
	}
	turn := func() {
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// A woken waiter holds before the releaser tries again: a
		// Semaphore's release wakes it rather than handing it the permit,
		// and the releaser, asking first, would take the permit back.
		// Either waiter may be the one: an RWMutex wakes the writer whose
		// registration runs out first, counted in whole ms, so two
		// registered in the same ms go in the order of their ids.
		var woken, other *contender
		select {
		case held = <-queue[1].lease:
			woken, other = queue[1], queue[2]
		case held = <-queue[2].lease:
			woken, other = queue[2], queue[1]
		}
		if held == nil {
			t.FailNow()
		}
		lock(queue[0])
		queue = []*contender{woken, other, queue[0]}
	}
	for range len(queue) {
		turn() // every contender subscribed, the scripts loaded
	}
	for range 4 {
		nextMillisecond(t, ctx, srv)
		calls := callsOf(t, ctx, srv, turn)
		if n := sum(calls); n != budget {
			t.Errorf("a contended acquisition ran %d Redis commands (%v); its budget is %d", n, calls, budget)
		}
	}
	for range 2 { // each waiter's lease, in the order they are woken
		if held != nil { // nil: a Lock that failed, reported
			_ = held.Unlock(ctx)
		}
		select {
		case held = <-queue[1].lease:
		case held = <-queue[2].lease:
		}
	}
	if held != nil {
		_ = held.Unlock(ctx)
	}
}

// nextMillisecond returns once srv's clock is in a later millisecond than
// when it was called, so that a registration that follows is not in the
// millisecond of one before. An RWMutex's costs one command more when it is:
// its waiters' set keeps the expiry of the registration before, which
// PEXPIRE GT then does not move, and a PTTL tells that from a set without
// one (keep_at_least in common.lua).
func nextMillisecond(t *testing.T, ctx context.Context, srv *redistest.Server) {
	t.Helper()
	now := func() int64 {
		tm, err := srv.Client().Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	start := now()
	eventually(t, ctx, "the server's clock moving on", func() bool { return now() > start })
}

// callsOf is how many of each command srv ran while f ran.
func callsOf(t *testing.T, ctx context.Context, srv *redistest.Server, f func()) map[string]int64 {
	t.Helper()
	before, err := serverstats.Calls(ctx, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	f()
	after, err := serverstats.Calls(ctx, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	for name, n := range before {
		if after[name] -= n; after[name] == 0 {
			delete(after, name)
		}
	}
	return after
}

func sum(calls map[string]int64) int64 {
	var n int64
	for _, c := range calls {
		n += c
	}
	return n
}

// A Semaphore's normal use: an acquire+release of one of 4 permits while
// another holder holds one, so that neither finds the semaphore quiet.
func TestCommandBudget_SemaphoreBesideAHolder(t *testing.T) {
	const budget = 25
	ctx := ctxFor(t, 30*time.Second)
	srv := redistest.Start(t)
	other, err := newClient(t, redis.NewClient(&redis.Options{Addr: srv.Addr()})).Semaphore("budget", 4).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Unlock(ctx) }()
	sem := newClient(t, redis.NewClient(&redis.Options{Addr: srv.Addr()})).Semaphore("budget", 4)
	pair := func() { lockUnlock(t, ctx, sem.Acquire) }
	pair() // scripts loaded, connections made
	for range 3 {
		calls := callsOf(t, ctx, srv, pair)
		if n := sum(calls); n != budget {
			t.Errorf("an acquire+release beside another holder ran %d Redis commands (%v); its budget is %d", n, calls, budget)
		}
	}
}

// A MultiLock's TryLock refused by one lock of its group: the MGET of the
// counters that finds the group not free spares foreign_key their GETs.
func TestCommandBudget_MultiLockRefused(t *testing.T) {
	for _, typ := range []struct {
		names  []string
		budget int64
	}{
		{[]string{"budget:a"}, 6},
		{[]string{"budget:a", "budget:b", "budget:c"}, 12},
	} {
		t.Run(fmt.Sprint(len(typ.names)), func(t *testing.T) {
			ctx := ctxFor(t, 30*time.Second)
			srv := redistest.Start(t)
			c := newClient(t, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
			held, err := c.Mutex(typ.names[len(typ.names)-1]).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = held.Unlock(ctx) }()
			m := c.MultiLock(typ.names)
			try := func() {
				if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
					t.Fatalf("TryLock with a lock held: %v, want ErrNotAcquired", err)
				}
			}
			try() // scripts loaded, connections made
			for range 2 {
				calls := callsOf(t, ctx, srv, try)
				if n := sum(calls); n != typ.budget {
					t.Errorf("a refused TryLock of %d locks ran %d Redis commands (%v); its budget is %d", len(typ.names), n, calls, typ.budget)
				}
			}
		})
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

// An uncontended Lock's first try sends its acquire's ARGV up to HOLD_TTL,
// those of its type always sent, and the rights flag: no empty field after
// them (scripts.Acquire); an RWMutex, its refusal's retry hint too. A fifth
// ARGV makes Redis grow the ARGV table, at about 1,500 instructions.
func TestCommandBudget_FirstTryARGV(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	var mu sync.Mutex
	sent := map[*redis.Script][]any{} // the last FCALL of each script
	rdb.AddHook(replyHook(func(cmd redis.Cmder, reply error) error {
		if args := cmd.Args(); cmd.Name() == "fcall" && len(args) > 2 {
			mu.Lock()
			sent[scripts.Of(fmt.Sprint(args[1]))] = args
			mu.Unlock()
		}
		return reply
	}))
	c := newClient(t, rdb)
	e := c.Election("argv")
	for _, typ := range []struct {
		name   string
		script *redis.Script
		argv   int
		lock   func(context.Context) (*dlock.Lease, error)
	}{
		{"Mutex", scripts.MutexAcquire, 3, c.Mutex("argv").Lock},
		{"FairMutex", scripts.FairAcquire, 4, c.FairMutex("argv").Lock},
		{"RWMutex read", scripts.RWAcquire, 6, c.RWMutex("argv").RLock},
		{"RWMutex write", scripts.RWAcquire, 6, c.RWMutex("argv").Lock},
		{"ReentrantMutex", scripts.RWAcquire, 6, c.ReentrantMutex("argv").Lock},
		{"Semaphore", scripts.SemAcquire, 4, c.Semaphore("argv", 4).Acquire},
		{"MultiLock of 3", scripts.MultiAcquire, 4, c.MultiLock([]string{"argv:a", "argv:b", "argv:c"}).Lock},
		{"Election", scripts.ElectionAcquire, 5, func(ctx context.Context) (*dlock.Lease, error) { return e.Campaign(ctx, "me") }},
	} {
		lockUnlock(t, ctx, typ.lock)
		mu.Lock()
		args := sent[typ.script]
		mu.Unlock()
		if len(args) < 3 {
			t.Fatalf("%s: its acquire sent no FCALL", typ.name)
		}
		n, _ := strconv.Atoi(fmt.Sprint(args[2]))
		if got := len(args) - 3 - n; got != typ.argv {
			t.Errorf("%s: its first try sent %d ARGV; want %d", typ.name, got, typ.argv)
		}
		// The script takes its last ARGV for the rights flag.
		if flag := args[len(args)-1]; flag != "" && flag != scripts.RightsKnown {
			t.Errorf("%s: its acquire ends with %q, not a rights flag", typ.name, flag)
		}
	}
}
