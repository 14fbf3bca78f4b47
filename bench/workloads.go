package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/check"
	"github.com/dlockio/dlock/internal/serverstats"
)

// A run is one library on its own server, in one round.
type run struct {
	lib   library
	addr  string
	admin *redis.Client
	round int
	scale float64 // shortens every workload (the quick profile)
}

func (r run) key(what string) string { return fmt.Sprintf("bench:%s:%s:%d", r.lib.name, what, r.round) }

func (r run) seconds(s float64) time.Duration {
	return time.Duration(s * r.scale * float64(time.Second))
}

// lockers opens n clients of the library.
func (r run) lockers(n int) ([]locker, func(), error) {
	ls := make([]locker, 0, n)
	closeAll := func() {
		for _, l := range ls {
			l.close()
		}
	}
	for range n {
		l, err := r.lib.open(r.addr)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		ls = append(ls, l)
	}
	return ls, closeAll, nil
}

func (r run) commands(ctx context.Context) int64 {
	n, _ := serverstats.Commands(ctx, r.admin)
	return n
}

// reads is how many reads the server has processed: requests, less any a
// client pipelined together.
func (r run) reads(ctx context.Context) float64 {
	n, _ := serverstats.Field(ctx, r.admin, "stats", "total_reads_processed")
	return n
}

// cpu is the CPU time the server has used, in seconds.
func (r run) cpu(ctx context.Context) float64 {
	s, _ := serverstats.CPU(ctx, r.admin)
	return s
}

// cost is what the server spent per operation: CPU time (INFO cpu) and
// commands (INFO commandstats, inside scripts counted).
type cost struct {
	cpu      time.Duration
	commands float64
}

// meter starts measuring the server's work; its result divides it by n.
func (r run) meter(ctx context.Context) func(n int64) cost {
	cpu, commands := r.cpu(ctx), r.commands(ctx)
	return func(n int64) cost {
		n = max(n, 1)
		return cost{
			cpu:      time.Duration((r.cpu(ctx) - cpu) / float64(n) * float64(time.Second)),
			commands: float64(r.commands(ctx)-commands) / float64(n),
		}
	}
}

// uncontended is workload 1: one goroutine locks and unlocks one key.
// It returns the mean time of a lock+unlock pair, and the server's cost.
func (r run) uncontended(ctx context.Context) (time.Duration, cost, error) {
	ls, closeAll, err := r.lockers(1)
	if err != nil {
		return 0, cost{}, err
	}
	defer closeAll()
	key := r.key("uncontended")
	pair := func() error {
		unlock, err := ls[0].lock(ctx, key)
		if err != nil {
			return err
		}
		return unlock(ctx)
	}
	for range 50 { // connections, scripts, subscriptions warmed up
		if err := pair(); err != nil {
			return 0, cost{}, err
		}
	}
	n := 0
	start, meter := time.Now(), r.meter(ctx)
	for time.Since(start) < r.seconds(1) {
		if err := pair(); err != nil {
			return 0, cost{}, err
		}
		n++
	}
	took := time.Since(start)
	return took / time.Duration(n), meter(int64(n)), nil
}

// distinctKeys is workload 2: 64 goroutines of one client, each on its own
// key. It returns lock+unlock pairs per second, and the server's cost.
func (r run) distinctKeys(ctx context.Context) (float64, cost, error) {
	ls, closeAll, err := r.lockers(1)
	if err != nil {
		return 0, cost{}, err
	}
	defer closeAll()
	var pairs atomic.Int64
	meter := r.meter(ctx)
	err = r.forWorkers(ctx, 64, r.seconds(2), func(ctx context.Context, g int) error {
		unlock, err := ls[0].lock(ctx, r.key(fmt.Sprint("distinct:", g)))
		if err != nil {
			return err
		}
		pairs.Add(1)
		return unlock(context.WithoutCancel(ctx))
	})
	spent := meter(pairs.Load())
	return float64(pairs.Load()) / r.seconds(2).Seconds(), spent, err
}

// contendedResult is workload 3's measurements.
type contendedResult struct {
	perSec   float64 // acquisitions per second
	commands float64 // Redis commands per acquisition, inside scripts counted
	requests float64 // requests the server read per acquisition (round trips)
	cpu      time.Duration
	client   time.Duration // this process's CPU per acquisition: the clients'
	fairness float64       // the most acquisitions of a client over the fewest
}

// contended is workload 3: 16 clients on one key, back to back. Besides the
// rate it counts, per acquisition, the Redis commands (INFO commandstats),
// the requests the server read (INFO stats total_reads_processed: a
// client's round trips, where it pipelines nothing), the server's CPU and
// the clients' (this process's).
func (r run) contended(ctx context.Context) (contendedResult, error) {
	ls, closeAll, err := r.lockers(16)
	if err != nil {
		return contendedResult{}, err
	}
	defer closeAll()
	key := r.key("contended")
	var fenced check.Fenced // a lock that let two in would be no result
	var acquired atomic.Int64
	perClient := make([]atomic.Int64, len(ls))
	before, readsBefore, cpuBefore, clientBefore := r.commands(ctx), r.reads(ctx), r.cpu(ctx), processCPU()
	err = r.forWorkers(ctx, len(ls), r.seconds(2), func(ctx context.Context, w int) error {
		unlock, err := ls[w].lock(ctx, key)
		if err != nil {
			return err
		}
		fenced.Enter(w, uint64(acquired.Add(1)), time.Now())
		fenced.Exit(w)
		perClient[w].Add(1)
		return unlock(context.WithoutCancel(ctx))
	})
	client := processCPU() - clientBefore
	most, least := perClient[0].Load(), perClient[0].Load()
	for i := range perClient {
		most, least = max(most, perClient[i].Load()), min(least, perClient[i].Load())
	}
	n := float64(max(acquired.Load(), 1))
	if res := fenced.Result(); res.Overlaps != 0 {
		return contendedResult{}, fmt.Errorf("%d overlapping holders", res.Overlaps)
	}
	return contendedResult{
		perSec:   float64(acquired.Load()) / r.seconds(2).Seconds(),
		commands: float64(r.commands(ctx)-before) / n,
		requests: (r.reads(ctx) - readsBefore) / n,
		cpu:      time.Duration((r.cpu(ctx) - cpuBefore) / n * float64(time.Second)),
		client:   time.Duration(float64(client) / n),
		fairness: float64(most) / float64(max(least, 1)),
	}, err
}

// waitersResult is workload 4's measurements.
type waitersResult struct {
	handoff, wait *check.Latencies
	least, most   int
	cost          cost             // per acquisition
	ping          *check.Latencies // a PING's round trip, sent as idly as the workers ask
}

// waiters is workload 4: 8 clients on one key, each holding it 2 ms and
// then thinking 3-6 ms outside it. A handoff is the time from a release to
// a different client, which was already waiting, holding the lock.
func (r run) waiters(ctx context.Context) (waitersResult, error) {
	ls, closeAll, err := r.lockers(8)
	if err != nil {
		return waitersResult{}, err
	}
	defer closeAll()
	key := r.key("waiters")
	var fenced check.Fenced
	var mu sync.Mutex
	var seq uint64
	waits := new(check.Latencies)
	perClient := make([]int, len(ls))
	// The yardstick for a handoff: a round trip measured alongside, by a
	// client as idle between requests as the workers, so that it pays the
	// same wake-ups (on a VM, those dominate a round trip from idle).
	pings := new(check.Latencies)
	pinger := redisClient(r.addr)
	defer pinger.Close()
	pingCtx, stopPings := context.WithCancel(ctx)
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		for pingCtx.Err() == nil {
			time.Sleep(3*time.Millisecond + rand.N(3*time.Millisecond))
			sent := time.Now()
			if pinger.Ping(pingCtx).Err() == nil {
				pings.Add(time.Since(sent))
			}
		}
	}()
	meter := r.meter(ctx)
	err = r.forWorkers(ctx, len(ls), r.seconds(3), func(ctx context.Context, w int) error {
		asked := time.Now()
		unlock, err := ls[w].lock(ctx, key)
		if err != nil {
			return err
		}
		mu.Lock()
		seq++
		token := seq
		perClient[w]++
		waits.Add(time.Since(asked))
		mu.Unlock()
		fenced.Enter(w, token, asked)
		time.Sleep(2 * time.Millisecond) // the work under the lock
		fenced.Exit(w)
		if err := unlock(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		time.Sleep(3*time.Millisecond + rand.N(3*time.Millisecond)) // thinking
		return nil
	})
	stopPings()
	<-pinged
	spent := meter(int64(seq))
	spent.commands -= float64(pings.Count()) / float64(max(seq, 1)) // the yardstick's PINGs
	if res := fenced.Result(); res.Overlaps != 0 {
		return waitersResult{}, fmt.Errorf("%d overlapping holders", res.Overlaps)
	}
	least, most := perClient[0], perClient[0]
	for _, n := range perClient {
		least, most = min(least, n), max(most, n)
	}
	return waitersResult{handoff: &fenced.Handoffs, wait: waits, least: least, most: most, ping: pings, cost: spent}, err
}

// heldResult is workload 5's measurements.
type heldResult struct {
	commandsPerSec float64
	cpu            time.Duration // this process's, while holding
	heapMB         float64
	goroutines     int
}

// held is workload 5: one client holds 10,000 leases for a while, renewing
// them (only libraries that renew by themselves take part).
func (r run) held(ctx context.Context, hold time.Duration) (heldResult, error) {
	const leases = 10_000
	ls, closeAll, err := r.lockers(1)
	if err != nil {
		return heldResult{}, err
	}
	defer closeAll()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutinesBefore := runtime.NumGoroutine()
	unlocks := make([]func(context.Context) error, leases)
	for i := range unlocks {
		if unlocks[i], err = ls[0].lock(ctx, r.key(fmt.Sprint("held:", i))); err != nil {
			return heldResult{}, err
		}
	}
	commandsBefore, cpuBefore := r.commands(ctx), processCPU()
	select {
	case <-time.After(hold):
	case <-ctx.Done():
		return heldResult{}, ctx.Err()
	}
	res := heldResult{
		commandsPerSec: float64(r.commands(ctx)-commandsBefore) / hold.Seconds(),
		cpu:            processCPU() - cpuBefore,
		goroutines:     runtime.NumGoroutine() - goroutinesBefore,
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	res.heapMB = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / (1 << 20)
	for _, unlock := range unlocks {
		_ = unlock(ctx)
	}
	return res, nil
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// forWorkers runs body over and over in n goroutines for d, and returns the
// first error other than the run's end.
func (r run) forWorkers(ctx context.Context, n int, d time.Duration, body func(ctx context.Context, w int) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := body(ctx, w); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
