package main

import (
	"context"
	"flag"
	"fmt"
	"time"
)

// demoHold is how long a worker keeps the lock: long enough that the others
// are waiting when it lets go, so releases are handoffs to measure.
const demoHold = time.Millisecond

const demoUsage = `Usage: dlock demo [--redis URL] [--workers N] [--duration duration]

Workers contend for one lock of each type in turn (Mutex, ReentrantMutex,
RWMutex, FairMutex, Semaphore, MultiLock, Election), each with its own
connection, and a checker watches them. Prints a verdict per type: acquisitions,
overlapping holders (must be 0), whether fencing tokens only increased,
how evenly the workers shared the lock, and handoff latency from a release
to a waiting worker holding the lock. Exits 0 only when every verdict
holds.

Without --redis it runs on an embedded Redis (miniredis) and needs nothing
installed. REDIS_URL is not enough to send it to a server: only --redis
does, so that a demo never runs on a production Redis by accident. On a
server of yours it writes under a key prefix of its own (dlock-sandbox-…:)
and deletes every key it wrote when it ends, also when interrupted.

Examples:
  dlock demo
  dlock demo --workers 16 --duration 2s
  dlock demo --redis redis://127.0.0.1:6379
`

func defineDemo(fs *flag.FlagSet) action {
	redisFlag := fs.String("redis", "", sandboxRedisUsage)
	workers := fs.Int("workers", 8, "workers per lock type, each with its own connection")
	duration := fs.Duration("duration", 2*time.Second, "how long the workers contend, per lock type")
	return func(ctx context.Context, fs *flag.FlagSet, out *output) int {
		switch {
		case *workers < 1:
			return usageError(out, "demo", "--workers must be at least 1")
		case *duration <= 0:
			return usageError(out, "demo", "--duration must be positive")
		case fs.NArg() != 0:
			return usageError(out, "demo", "takes no arguments")
		}
		return demo(ctx, *workers, *duration, *redisFlag, out)
	}
}

// demo runs workers on every lock type for duration each, on the Redis at
// url, else an embedded one.
func demo(ctx context.Context, workers int, duration time.Duration, url string, out *output) int {
	box, err := openSandbox(ctx, url)
	if err != nil {
		fmt.Fprintf(out.stderr, "dlock demo: %v\n", err)
		return exitCodeOf(ctx, err)
	}
	defer box.close(ctx, "demo", out)
	fmt.Fprintf(out.stdout, "dlock demo: %d workers per lock type, %v each, on %s\n\n", workers, duration, box.where)

	results := make(map[string]contentionResult)
	for _, lockType := range lockTypes {
		c := &contention{lockType: lockType, newRedis: box.newRedis, prefix: box.prefix, name: "demo:" + lockType,
			workers: workers, duration: duration, hold: demoHold}
		stopProgress := out.progress(200*time.Millisecond, func() string {
			return fmt.Sprintf("%-15s %d acquisitions", lockType, c.acquired.Load())
		})
		res, err := c.run(ctx)
		stopProgress()
		if err != nil {
			return contentionFailed(ctx, "demo", lockType+": ", err, out)
		}
		results[lockType] = res
	}

	ok := true
	fmt.Fprintf(out.stdout, "%-15s %12s %9s %11s %8s %12s %12s\n", "lock", "acquisitions", "overlaps", "tokens", "max/min",
		"handoff p50", "handoff p99")
	for _, lockType := range lockTypes {
		r := results[lockType]
		ok = ok && r.ok()
		tokens := "increasing"
		if r.stale > 0 {
			tokens = "STALE"
		}
		p50, p99 := "-", "-"
		if r.handoffs != nil {
			p50, p99 = round(r.handoffs.Percentile(50)), round(r.handoffs.Percentile(99))
		}
		fmt.Fprintf(out.stdout, "%-15s %12d %9d %11s %8.2f %12s %12s\n", lockType, r.acquisitions, r.overlaps, tokens,
			r.spread(), p50, p99)
	}
	rw := results["RWMutex"]
	fmt.Fprintf(out.stdout, "\nRWMutex: one worker in four writes; overlaps count a writer inside with anyone;\n"+
		"handoffs are to waiting writers (to waiting readers: p50 %s, p99 %s).\n"+
		"Semaphore: %d permits; overlaps count holders beyond them, tokens must never repeat.\n"+
		"MultiLock: each worker locks two of three names, in either order; overlaps per name.\n"+
		"Election: each worker campaigns, leads for the hold, and resigns; overlaps are two leaders.\n"+
		"max/min: the most acquisitions of a worker over the fewest (the FairMutex's is near 1).\n",
		round(rw.readHandoffs.Percentile(50)), round(rw.readHandoffs.Percentile(99)), semaphorePermits(workers))
	if !ok {
		fmt.Fprintln(out.stdout, "\nverdict: FAILED — a lock let holders overlap or a stale token through")
		return 1
	}
	fmt.Fprintln(out.stdout, "\nverdict: OK — no overlapping holders, fencing tokens strictly increasing")
	return 0
}

func round(d time.Duration) string {
	return d.Round(10 * time.Microsecond).String()
}
