// Command dlock runs distributed locks on Redis from the shell.
//
//	dlock demo [--redis URL] [--workers N] [--duration D]
//
// With no --redis (and no REDIS_URL), demo starts an embedded Redis in the
// process, so it needs nothing installed.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `dlock: distributed locks on Redis

Usage:
  dlock demo [--redis URL] [--workers N] [--duration D]
        Workers contend for one lock; prints a verdict on mutual exclusion,
        fencing tokens and handoff latency. Without --redis it runs on an
        embedded Redis and needs nothing installed.

The Redis address comes from --redis or REDIS_URL (redis:// or rediss://).
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one subcommand and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "dlock: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
