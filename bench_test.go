package dlock_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/check"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/serverstats"
)

// Benchmarks run against a redis-server of their own, so the server's
// command counters (INFO commandstats) see nothing but the benchmark.
//
//	go test -run '^$' -bench . -benchtime 5000x .

// ownRedis is a go-redis client of srv with connections of its own, as
// another process's would be: srv.Client() is one client, shared by every
// caller, and a hook on it counts what the others send.
func ownRedis(b *testing.B, srv *redistest.Server) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// serverCommands is what the server has run so far, inside scripts too.
func serverCommands(b *testing.B, ctx context.Context, rdb *redis.Client) int64 {
	b.Helper()
	n, err := serverstats.Commands(ctx, rdb)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// shareIterations runs b.N iterations of body over workers goroutines, each
// taking the next iteration when done with its last, so fast workers do more.
func shareIterations(b *testing.B, workers int, body func(worker int) error) {
	var next sync.Mutex
	remaining := b.N
	var wg sync.WaitGroup
	for worker := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				next.Lock()
				if remaining == 0 {
					next.Unlock()
					return
				}
				remaining--
				next.Unlock()
				if err := body(worker); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// lockUnlock takes a lock and releases it, failing the test or benchmark
// on an error.
func lockUnlock(tb testing.TB, ctx context.Context, lock func(context.Context) (*dlock.Lease, error)) {
	tb.Helper()
	lease, err := lock(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if err := lease.Unlock(ctx); err != nil {
		tb.Fatal(err)
	}
}

func BenchmarkMutex_UncontendedLockUnlock(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client()
	counter := &commandCounter{}
	rdb.AddHook(counter)
	mu := newClient(b, rdb).Mutex("bench:uncontended")
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		lockUnlock(b, ctx, mu.Lock)
	}
	b.StopTimer()
	b.ReportMetric(float64(counter.commands.Load())/float64(b.N), "roundtrips/op")
}

// The server's time in scripts per uncontended Mutex Lock+Unlock, as FCALL
// (the default user) and as EVALSHA (a user allowed everything but Redis
// Functions), taken in turn on one server so that both see the same load
// (INFO commandstats usec, inner commands included):
//
//	nice go test -run '^$' -bench FunctionsVsEvalsha -benchtime 10000x .
func BenchmarkMutex_FunctionsVsEvalsha(b *testing.B) {
	srv := redistest.Start(b)
	admin := srv.Client()
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "noFunctions", "on", ">secret", "~*", "&*", "+@all", "-fcall", "-function").Err(); err != nil {
		b.Fatal(err)
	}
	evalsha := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "noFunctions", Password: "secret"})
	b.Cleanup(func() { _ = evalsha.Close() })
	byFunction := newClient(b, admin).Mutex("bench:fcall")
	byEvalsha := newClient(b, evalsha).Mutex("bench:evalsha")
	lockUnlock(b, ctx, byFunction.Lock) // the library loaded, the connections made
	lockUnlock(b, ctx, byEvalsha.Lock)
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		lockUnlock(b, ctx, byFunction.Lock)
		lockUnlock(b, ctx, byEvalsha.Lock)
	}
	b.StopTimer()
	for _, cmd := range []string{"fcall", "evalsha"} {
		usec, err := serverstats.CommandStat(ctx, admin, cmd, "usec")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(usec/float64(b.N), "server-µs/pair-"+cmd)
	}
}

// Eight clients, each with its own connections, take one lock back to back.
// A handoff is the time from a release to a different client holding it.
func BenchmarkMutex_Contended8Clients(b *testing.B) {
	benchContended8(b, func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) {
		return c.Mutex("bench:contended").Lock
	})
}

// The same with the FairMutex: a release hands the lock to the head of the
// line; "max/min" is the most acquisitions of a client over the fewest.
func BenchmarkFairMutex_Contended8Clients(b *testing.B) {
	benchContended8(b, func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) {
		return c.FairMutex("bench:contended").Lock
	})
}

func benchContended8(b *testing.B, lockOf func(*dlock.Client) func(context.Context) (*dlock.Lease, error)) {
	const clients = 8
	srv := redistest.Start(b)
	admin := srv.Client()
	ctx := context.Background()
	var fenced check.Fenced
	locks := make([]func(context.Context) (*dlock.Lease, error), clients)
	for i := range locks {
		locks[i] = lockOf(newClient(b, ownRedis(b, srv)))
	}
	for _, lock := range locks { // scripts loaded, subscribers connected
		lockUnlock(b, ctx, lock)
	}

	perClient := make([]int, clients)
	before := serverCommands(b, ctx, admin)
	b.ResetTimer()
	shareIterations(b, len(locks), func(worker int) error {
		asked := time.Now()
		lease, err := locks[worker](ctx)
		if err != nil {
			return err
		}
		fenced.Enter(worker, lease.Token(), asked)
		perClient[worker]++
		fenced.Exit(worker)
		return lease.Unlock(ctx)
	})
	b.StopTimer()
	commands := serverCommands(b, ctx, admin) - before
	if r := fenced.Result(); r.Overlaps != 0 || r.Stale != 0 {
		b.Fatalf("unsafe run: %+v", r)
	}
	b.ReportMetric(float64(commands)/float64(b.N), "rediscmds/acq")
	b.ReportMetric(float64(fenced.Handoffs.Percentile(50).Microseconds()), "handoff-p50-µs")
	b.ReportMetric(float64(fenced.Handoffs.Percentile(99).Microseconds()), "handoff-p99-µs")
	b.ReportMetric(float64(fenced.Handoffs.Count())/float64(b.N), "handoffs/acq")
	b.ReportMetric(float64(slices.Max(perClient))/float64(max(slices.Min(perClient), 1)), "max/min")
}

// One acquisition and release at a time of each of the other types: round
// trips, Redis commands (inside scripts counted) and allocations.
func BenchmarkFamily_Uncontended(b *testing.B) {
	types := []struct {
		name string
		lock func(c *dlock.Client) func(context.Context) (*dlock.Lease, error)
	}{
		{"FairMutex", func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) {
			return c.FairMutex("bench:fair").Lock
		}},
		{"Semaphore", func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) {
			return c.Semaphore("bench:sem", 4).Acquire
		}},
		{"MultiLock3", func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) {
			return c.MultiLock([]string{"bench:a", "bench:b", "bench:c"}).Lock
		}},
	}
	for _, typ := range types {
		b.Run(typ.name, func(b *testing.B) {
			srv := redistest.Start(b)
			admin := srv.Client()
			rdb := ownRedis(b, srv)
			counter := &commandCounter{}
			rdb.AddHook(counter)
			lock := typ.lock(newClient(b, rdb))
			ctx := context.Background()
			lockUnlock(b, ctx, lock) // scripts loaded
			roundTrips, before := counter.commands.Load(), serverCommands(b, ctx, admin)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				lockUnlock(b, ctx, lock)
			}
			b.StopTimer()
			b.ReportMetric(float64(counter.commands.Load()-roundTrips)/float64(b.N), "roundtrips/op")
			b.ReportMetric(float64(serverCommands(b, ctx, admin)-before)/float64(b.N), "rediscmds/op")
		})
	}
}

// 10,000 leases held and renewed by one Client: what they cost in
// goroutines and memory, and the renewal traffic they make.
func BenchmarkLease_10000Held(b *testing.B) {
	const leases = 10_000
	const ttl = 3 * time.Second
	srv := redistest.Start(b)
	admin := srv.Client()
	ctx := context.Background()
	for b.Loop() {
		c, err := dlock.New(ownRedis(b, srv), dlock.WithTTL(ttl))
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		var start runtime.MemStats
		runtime.ReadMemStats(&start)

		held := make([]*dlock.Lease, leases)
		for i := range held {
			lease, err := c.Mutex(fmt.Sprintf("bench:held:%d", i)).TryLock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			held[i] = lease
		}
		commandsBefore := serverCommands(b, ctx, admin)
		hold := 2 * ttl // six renewal rounds
		time.Sleep(hold)
		renewalsPerSec := float64(serverCommands(b, ctx, admin)-commandsBefore) / hold.Seconds()

		runtime.GC()
		var end runtime.MemStats
		runtime.ReadMemStats(&end)
		goroutines := runtime.NumGoroutine() // all of the process: the test's own included
		for _, lease := range held {
			if err := lease.Err(); err != nil {
				b.Fatalf("lease lost while held: %v", err)
			}
		}
		b.ReportMetric(float64(end.HeapAlloc-start.HeapAlloc)/(1<<20), "heap-MB")
		b.ReportMetric(float64(goroutines), "process-goroutines")
		b.ReportMetric(renewalsPerSec, "rediscmds/s")
		for _, lease := range held {
			_ = lease.Unlock(ctx)
		}
		_ = c.Close()
	}
}

// One read or write lock and unlock at a time: the Redis commands each
// acquisition costs (commands inside scripts counted) and round trips.
func BenchmarkRWMutex_Uncontended(b *testing.B) {
	for _, mode := range []string{"read", "write"} {
		b.Run(mode, func(b *testing.B) {
			srv := redistest.Start(b)
			admin := srv.Client()
			rdb := ownRedis(b, srv)
			counter := &commandCounter{}
			rdb.AddHook(counter)
			rw := newClient(b, rdb).RWMutex("bench:rw")
			lock := rw.Lock
			if mode == "read" {
				lock = rw.RLock
			}
			ctx := context.Background()
			before := serverCommands(b, ctx, admin)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				lockUnlock(b, ctx, lock)
			}
			b.StopTimer()
			b.ReportMetric(float64(counter.commands.Load())/float64(b.N), "roundtrips/op")
			b.ReportMetric(float64(serverCommands(b, ctx, admin)-before)/float64(b.N), "rediscmds/op")
		})
	}
}

// 16 readers and 4 writers, each a client of its own, take one RWMutex back
// to back. A handoff is from the moment the lock became free for a waiting
// entrant (a writer leaving, for readers; everyone leaving, for a writer) to
// that entrant holding it.
func BenchmarkRWMutex_16Readers4Writers(b *testing.B) {
	const readers, writers = 16, 4
	srv := redistest.Start(b)
	admin := srv.Client()
	ctx := context.Background()
	var shared check.Shared
	type worker struct {
		rw    *dlock.RWMutex
		write bool
	}
	var workers []worker
	for i := range readers + writers {
		workers = append(workers, worker{newClient(b, ownRedis(b, srv)).RWMutex("bench:rw16+4"), i >= readers})
	}
	for _, w := range workers { // scripts loaded, subscribers connected
		lockUnlock(b, ctx, w.rw.Lock)
	}

	before := serverCommands(b, ctx, admin)
	start := time.Now()
	b.ResetTimer()
	shareIterations(b, len(workers), func(i int) error {
		w := workers[i]
		asked := time.Now()
		var lease *dlock.Lease
		var err error
		if w.write {
			lease, err = w.rw.Lock(ctx)
		} else {
			lease, err = w.rw.RLock(ctx)
		}
		if err != nil {
			return err
		}
		if w.write {
			shared.EnterWrite(lease.Token(), asked)
			shared.ExitWrite()
		} else {
			shared.EnterRead(asked)
			shared.ExitRead()
		}
		return lease.Unlock(ctx)
	})
	b.StopTimer()
	elapsed := time.Since(start)
	commands := serverCommands(b, ctx, admin) - before
	r := shared.Result()
	if r.Conflicts != 0 || r.Stale != 0 {
		b.Fatalf("unsafe run: %+v", r)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "acq/s")
	b.ReportMetric(float64(r.Writes)/float64(b.N), "writes/acq")
	b.ReportMetric(float64(commands)/float64(b.N), "rediscmds/acq")
	b.ReportMetric(float64(shared.WriteHandoffs.Percentile(50).Microseconds()), "w-handoff-p50-µs")
	b.ReportMetric(float64(shared.WriteHandoffs.Percentile(99).Microseconds()), "w-handoff-p99-µs")
	b.ReportMetric(float64(shared.ReadHandoffs.Percentile(50).Microseconds()), "r-handoff-p50-µs")
	b.ReportMetric(float64(shared.ReadHandoffs.Percentile(99).Microseconds()), "r-handoff-p99-µs")
}

// Lock and unlock, one at a time, on a Redlock of 3 and 5 masters against
// a Mutex on one: the cost of the quorum (parallel round trips, the
// fencing token's write-back) in latency and allocations.
func BenchmarkRedlock_UncontendedLockUnlock(b *testing.B) {
	ctx := context.Background()
	b.Run("Mutex/1-master", func(b *testing.B) {
		mu := newClient(b, redistest.Start(b).Client()).Mutex("bench:redlock")
		lockUnlock(b, ctx, mu.Lock)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			lockUnlock(b, ctx, mu.Lock)
		}
	})
	for _, n := range []int{3, 5} {
		b.Run(fmt.Sprintf("Redlock/%d-masters", n), func(b *testing.B) {
			mu := redlockOver(b, redistest.StartMasters(b, n)).Mutex("bench:redlock")
			lockUnlock(b, ctx, mu.Lock)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				lockUnlock(b, ctx, mu.Lock)
			}
		})
	}
}

// 64 goroutines of one Client, each locking and unlocking a key of its own:
// what the client and server spend per pair when nothing contends.
func BenchmarkMutex_64GoroutinesDistinctKeys(b *testing.B) {
	srv := redistest.Start(b)
	c := newClient(b, srv.Client())
	ctx := context.Background()
	mutexes := make([]*dlock.Mutex, 64)
	for i := range mutexes {
		mutexes[i] = c.Mutex(fmt.Sprint("bench:distinct:", i))
		lockUnlock(b, ctx, mutexes[i].Lock)
	}
	b.ReportAllocs()
	b.ResetTimer()
	shareIterations(b, len(mutexes), func(worker int) error {
		lease, err := mutexes[worker].Lock(ctx)
		if err != nil {
			return err
		}
		return lease.Unlock(ctx)
	})
}
