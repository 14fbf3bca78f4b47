package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/check"
)

// demoHold is how long a worker keeps the lock: long enough that the others
// are waiting when it lets go, so every release is a handoff to measure.
const demoHold = time.Millisecond

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	redisFlag := fs.String("redis", "", "Redis URL (default: REDIS_URL, else an embedded Redis)")
	workers := fs.Int("workers", 8, "workers contending for the lock, each with its own connection")
	duration := fs.Duration("duration", 3*time.Second, "how long the workers contend")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *workers < 1 || *duration <= 0 {
		fmt.Fprintln(stderr, "dlock demo: --workers must be at least 1 and --duration positive")
		return 2
	}

	newRedis, where, stopRedis, err := demoRedis(ctx, redisURL(*redisFlag))
	if err != nil {
		fmt.Fprintf(stderr, "dlock demo: %v\n", err)
		return 1
	}
	defer stopRedis()
	fmt.Fprintf(stdout, "dlock demo: %d workers contend for one lock for %v on %s\n\n", *workers, *duration, where)

	name := fmt.Sprintf("demo:%d", time.Now().UnixNano()) // fresh on a shared server
	v, err := demoMutex(ctx, newRedis, name, *workers, *duration)
	if err != nil {
		fmt.Fprintf(stderr, "dlock demo: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%-8s %12s %9s %10s %12s %12s\n", "lock", "acquisitions", "overlaps", "tokens", "handoff p50", "handoff p99")
	fmt.Fprintf(stdout, "%-8s %12d %9d %10s %12s %12s\n", "Mutex", v.fenced.Completed, v.fenced.Overlaps,
		map[bool]string{true: "increasing", false: "STALE"}[v.fenced.Stale == 0],
		round(v.handoffs.Percentile(50)), round(v.handoffs.Percentile(99)))
	if !v.ok() {
		fmt.Fprintln(stdout, "\nverdict: FAILED — the lock let holders overlap or a stale token through")
		return 1
	}
	fmt.Fprintln(stdout, "\nverdict: OK — no overlapping holders, fencing tokens strictly increasing")
	return 0
}

// demoRedis returns a way to open clients of the server the demo runs on:
// the one at url, or an embedded miniredis whose TTLs run on the real clock.
func demoRedis(ctx context.Context, url string) (newRedis func() *redis.Client, where string, stop func(), err error) {
	if url == "" {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		if err := m.Start(); err != nil {
			return nil, "", nil, fmt.Errorf("starting the embedded Redis: %w", err)
		}
		addr := m.Addr()
		return func() *redis.Client { return redis.NewClient(&redis.Options{Addr: addr}) },
			"an embedded Redis (miniredis)", m.Close, nil
	}
	probe, err := connect(ctx, url)
	if err != nil {
		return nil, "", nil, err
	}
	opts := probe.Options()
	_ = probe.Close()
	return func() *redis.Client { return redis.NewClient(opts) }, "Redis at " + opts.Addr, func() {}, nil
}

type demoVerdict struct {
	fenced   check.Result
	handoffs *check.Latencies
}

func (v demoVerdict) ok() bool {
	return v.fenced.Completed > 0 && v.fenced.Overlaps == 0 && v.fenced.Stale == 0
}

// demoMutex has workers take the lock in turn until duration is up, each on
// its own connection, as separate processes would.
func demoMutex(ctx context.Context, newRedis func() *redis.Client, name string, workers int, duration time.Duration) (demoVerdict, error) {
	fenced := &check.Fenced{}
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for worker := range workers {
		rdb := newRedis()
		client := dlock.New(rdb)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer rdb.Close()
			defer client.Close()
			mu := client.Mutex(name)
			for {
				asked := time.Now()
				lease, err := mu.Lock(ctx)
				if err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						errs <- err
					}
					return
				}
				fenced.Enter(worker, lease.Token(), asked)
				time.Sleep(demoHold) // the work done under the lock
				fenced.Exit(worker)
				if err := lease.Unlock(ctx); err != nil && ctx.Err() == nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return demoVerdict{}, err
	}
	return demoVerdict{fenced: fenced.Result(), handoffs: &fenced.Handoffs}, nil
}

func round(d time.Duration) string {
	return d.Round(10 * time.Microsecond).String()
}
