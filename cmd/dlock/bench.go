package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlockio/dlock/internal/serverstats"
)

const benchUsage = `Usage: dlock bench [flags]

Contention benchmark: --clients clients, each with its own
connection, take one lock of --type back to back for --duration, holding it
for --hold each time. Prints acquisitions per second, the handoff latency
from a release to a waiting client holding the lock (p50, p99), and the Redis
commands the server ran per acquisition (INFO commandstats, commands inside
scripts counted: run it on a server nothing else uses). Exits 1 if holders
overlapped.

Without --redis it runs on an embedded Redis (miniredis), which does not
count commands. REDIS_URL is not enough to send it to a server: only
--redis does, so that a benchmark never runs on a production Redis by
accident. On a server of yours it writes under a key prefix of its own
(dlock-sandbox-…:) and deletes every key it wrote when it ends, also when
interrupted.

Examples:
  dlock bench
  dlock bench --type RWMutex --clients 20 --duration 10s
  dlock bench --redis redis://10.0.0.5:6379 --hold 2ms
`

func defineBench(fs *flag.FlagSet) action {
	redisFlag := fs.String("redis", "", sandboxRedisUsage)
	lockType := fs.String("type", "Mutex", "lock `type`: "+strings.Join(lockTypes, ", "))
	clients := fs.Int("clients", 8, "contending clients, each with its own connection")
	duration := fs.Duration("duration", 5*time.Second, "how long they contend")
	hold := fs.Duration("hold", 0, "how long each holds the lock")
	return func(ctx context.Context, fs *flag.FlagSet, out *output) int {
		switch {
		case !slices.Contains(lockTypes, *lockType):
			return usageError(out, "bench", "--type is one of %s, not %q", strings.Join(lockTypes, ", "), *lockType)
		case *clients < 1:
			return usageError(out, "bench", "--clients must be at least 1")
		case *duration <= 0:
			return usageError(out, "bench", "--duration must be positive")
		case *hold < 0:
			return usageError(out, "bench", "--hold must not be negative")
		case fs.NArg() != 0:
			return usageError(out, "bench", "takes no arguments")
		}
		c := &contention{lockType: *lockType, workers: *clients, duration: *duration, hold: *hold}
		return bench(ctx, c, *redisFlag, out)
	}
}

// bench runs the contention c on the Redis at url and reports it.
func bench(ctx context.Context, c *contention, url string, out *output) int {
	box, err := openSandbox(ctx, url)
	if err != nil {
		fmt.Fprintf(out.stderr, "dlock bench: %v\n", err)
		return exitCodeOf(ctx, err)
	}
	defer box.close(ctx, "bench", out)
	admin := box.newRedis()
	defer admin.Close()

	fmt.Fprintf(out.stdout, "dlock bench: %s, %d clients, %v, hold %v, on %s\n", c.lockType, c.workers, c.duration, c.hold, box.where)
	c.newRedis, c.prefix, c.name = box.newRedis, box.prefix, "bench:"+c.lockType
	// miniredis does not count commands: only a real server's are read.
	commands := func(context.Context) (int64, error) { return 0, nil }
	if !box.embedded {
		commands = func(ctx context.Context) (int64, error) { return serverstats.Commands(ctx, admin) }
	}
	before, err := commands(ctx)
	if err != nil {
		fmt.Fprintf(out.stderr, "dlock bench: reading the server's command counts: %v\n", err)
		return exitCodeOf(ctx, err)
	}
	stop := out.progress(200*time.Millisecond, func() string { return fmt.Sprintf("%d acquisitions", c.acquired.Load()) })
	res, err := c.run(ctx)
	stop()
	if err != nil {
		return contentionFailed(ctx, "bench", "", err, out)
	}
	after, err := commands(ctx)
	if err != nil {
		fmt.Fprintf(out.stderr, "dlock bench: reading the server's command counts: %v\n", err)
		return exitCodeOf(ctx, err)
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
	if box.embedded {
		fmt.Fprintf(out.stdout, "Redis commands:  not counted by the embedded Redis (--redis URL counts them)\n")
	} else {
		fmt.Fprintf(out.stdout, "Redis commands:  %.1f per acquisition\n", float64(after-before)/float64(n))
	}
	if !res.ok() {
		fmt.Fprintf(out.stdout, "UNSAFE: %d overlapping holders, %d stale tokens\n", res.overlaps, res.stale)
		return exitFailure
	}
	return 0
}

// contentionFailed reports a demo's or bench's run that stopped early: a
// signal (128+N), or Redis failing.
func contentionFailed(ctx context.Context, command, what string, err error, out *output) int {
	if code, ok := signalExit(ctx); ok {
		fmt.Fprintf(out.stderr, "dlock %s: %v; its keys are deleted\n", command, context.Cause(ctx))
		return code
	}
	fmt.Fprintf(out.stderr, "dlock %s: %s%v\n", command, what, err)
	return exitCodeOf(ctx, err)
}
