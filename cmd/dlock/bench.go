package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dlockio/dlock/internal/serverstats"
)

const benchUsage = `Usage: dlock bench [flags]

Contention benchmark against a Redis: --clients clients, each with its own
connection, take one lock of --type back to back for --duration, holding it
for --hold each time. Prints acquisitions per second, the handoff latency
from a release to a waiting client holding the lock (p50, p99), and the Redis
commands the server ran per acquisition (INFO commandstats, commands inside
scripts counted: run it on a server nothing else uses). Exits 1 if holders
overlapped.

Examples:
  dlock bench
  dlock bench --type RWMutex --clients 20 --duration 10s
  dlock bench --redis redis://10.0.0.5:6379 --hold 2ms
`

func runBench(ctx context.Context, args []string, out *output) int {
	fs := newFlagSet("bench", benchUsage, out)
	redisFlag := fs.String("redis", "", "Redis URL (default: REDIS_URL, else "+defaultRedisURL+")")
	lockType := fs.String("type", "Mutex", "lock type: Mutex, ReentrantMutex or RWMutex")
	clients := fs.Int("clients", 8, "contending clients, each with its own connection")
	duration := fs.Duration("duration", 5*time.Second, "how long they contend")
	hold := fs.Duration("hold", 0, "how long each holds the lock")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if !slices.Contains(lockTypes, *lockType) || *clients < 1 || *duration <= 0 || *hold < 0 || fs.NArg() != 0 {
		fmt.Fprintf(out.stderr, "dlock bench: --type is one of %v, --clients at least 1, --duration positive, --hold not negative\n", lockTypes)
		return exitUsage
	}
	url := redisURL(*redisFlag)
	if url == "" {
		url = defaultRedisURL
	}
	d, admin, err := connect(ctx, url)
	if err != nil {
		fmt.Fprintf(out.stderr, "dlock bench: %v\n", err)
		return exitRedis
	}
	defer admin.Close()

	fmt.Fprintf(out.stdout, "dlock bench: %s, %d clients, %v, hold %v, on Redis at %s\n", *lockType, *clients, *duration, *hold, d)
	c := &contention{lockType: *lockType, newRedis: d.client, name: fmt.Sprintf("bench:%d", time.Now().UnixNano()),
		workers: *clients, duration: *duration, hold: *hold}
	before, err := serverstats.Commands(ctx, admin)
	if err != nil {
		fmt.Fprintf(out.stderr, "dlock bench: reading the server's command counts: %v\n", err)
		return exitRedis
	}
	stop := out.progress(200*time.Millisecond, func() string { return fmt.Sprintf("%d acquisitions", c.acquired.Load()) })
	res, err := c.run(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(out.stderr, "dlock bench: %v\n", err)
		return exitRedis
	}
	after, err := serverstats.Commands(ctx, admin)
	if err != nil {
		fmt.Fprintf(out.stderr, "dlock bench: reading the server's command counts: %v\n", err)
		return exitRedis
	}
	n := max(res.acquisitions, 1)
	fmt.Fprintf(out.stdout, "acquisitions:    %d (%.0f/s)\n", res.acquisitions, float64(res.acquisitions)/res.elapsed.Seconds())
	if res.handoffs != nil {
		fmt.Fprintf(out.stdout, "handoff:         p50 %s, p99 %s (%d handoffs)\n",
			round(res.handoffs.Percentile(50)), round(res.handoffs.Percentile(99)), res.handoffs.Count())
	}
	if res.readHandoffs != nil {
		fmt.Fprintf(out.stdout, "  to readers:    p50 %s, p99 %s (%d)\n",
			round(res.readHandoffs.Percentile(50)), round(res.readHandoffs.Percentile(99)), res.readHandoffs.Count())
	}
	fmt.Fprintf(out.stdout, "per client:      max/min %.2f\n", res.spread())
	fmt.Fprintf(out.stdout, "Redis commands:  %.1f per acquisition\n", float64(after-before)/float64(n))
	if !res.ok() {
		fmt.Fprintf(out.stdout, "UNSAFE: %d overlapping holders, %d stale tokens\n", res.overlaps, res.stale)
		return exitFailure
	}
	return 0
}
