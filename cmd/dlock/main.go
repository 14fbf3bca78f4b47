// Command dlock runs distributed locks on Redis from the shell: a command
// under a lock (a distributed flock(1) for cron jobs and deploy steps), the
// state of a lock, a forced unlock, a demo and a benchmark. Run
// `dlock help` for the commands and `dlock COMMAND --help` for each.
//
// It uses the standard library's flag package: one FlagSet per subcommand
// covers what dlock needs, and a CLI dependency would be the only one the
// library does not already have.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Exit codes. A command run by `dlock run` passes its own through.
const (
	exitFailure      = 1   // the demo's verdict failed; the lock held a foreign value; not confirmed
	exitUsage        = 2   // bad flags or arguments
	exitRedis        = 69  // Redis could not be reached or failed (EX_UNAVAILABLE)
	exitNoPermission = 77  // Redis refused the login or a command dlock needs (EX_NOPERM)
	exitNotAcquired  = 75  // the lock was not acquired within --wait (EX_TEMPFAIL: try later)
	exitLost         = 76  // the lock was lost while the command ran; the command was stopped
	exitCannotRun    = 126 // the command could not be started
	exitNotFound     = 127 // the command was not found
)

const usage = `dlock: distributed locks on Redis

Usage:
  dlock run [flags] NAME -- COMMAND [ARGS...]   run a command while holding a lock
  dlock status [--json] NAME                    who holds a lock, for how long, who waits
  dlock unlock --force [--yes] NAME             remove a lock whatever holds it
  dlock demo [flags]                            every lock type under contention, with a verdict
  dlock bench [flags]                           a contention benchmark against a Redis
  dlock version                                 the version of dlock

Run 'dlock COMMAND --help' for a command's flags and examples.

Redis: --redis URL, else REDIS_URL, else redis://127.0.0.1:6379.
  redis://[user:password@]host:port[/db]   rediss:// for TLS; or host:port
  Several URLs separated by commas are the nodes of a cluster; a single
  node of a cluster is recognised by itself.

Exit codes:
  0    success (run: the command's own exit code is passed through)
  1    failure: demo verdict failed, a foreign value under the lock's key, not confirmed
  2    bad flags or arguments
  69   Redis could not be reached or failed
  77   Redis refused the login (user, password) or a command (ACL)
  75   run: the lock was not acquired within --wait
  76   run: the lock was lost while the command ran; the command was stopped
  126  run: the command could not be started;  127: not found
  128+N  run: the command was killed by signal N; signal N stopped the wait
`

func main() {
	// go-redis logs a failed dial from its pool, several times a second while
	// Redis is down; dlock reports what failed once, in its own words.
	redis.SetLogger(silentLogger{})
	ctx, stop := signalContext(context.Background())
	out := &output{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, tty: isTerminal(os.Stderr)}
	code := run(ctx, os.Args[1:], out)
	stop()
	os.Exit(code)
}

// silentLogger drops go-redis's log lines.
type silentLogger struct{}

func (silentLogger) Printf(context.Context, string, ...any) {}

// stopSignals end what dlock is doing: waiting for a lock, a demo, a
// benchmark. SIGHUP too, so that a closed terminal or ssh session withdraws
// a waiting run from the queue instead of killing dlock mid-wait.
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// signalled is the cause of main's context when a signal ended it: the
// exit code is 128+N for signal N, as for a shell's command killed by it.
type signalled struct{ sig syscall.Signal }

func (s signalled) Error() string { return "interrupted by " + signalName(s.sig) }

// signalName is SIGTERM rather than "terminated".
func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return sig.String()
}

// signalContext is cancelled, with a signalled cause, by the first of
// stopSignals. Later ones are absorbed while dlock cleans up: its cleanup
// (leaving the queue, releasing) is bounded by dlock.CleanupTimeout.
func signalContext(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, stopSignals...)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-signals:
			cancel(signalled{sig.(syscall.Signal)})
		case <-done:
		}
	}()
	return ctx, func() {
		close(done)
		cancel(nil)
	}
}

// signalExit is 128+N when a signal N ended ctx.
func signalExit(ctx context.Context) (code int, ok bool) {
	var s signalled
	if errors.As(context.Cause(ctx), &s) {
		return 128 + int(s.sig), true
	}
	return 0, false
}

// run executes one subcommand and returns the process exit code.
func run(ctx context.Context, args []string, out *output) int {
	if len(args) == 0 {
		fmt.Fprint(out.stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return runRun(ctx, args[1:], out)
	case "status":
		return runStatus(ctx, args[1:], out)
	case "unlock":
		return runUnlock(ctx, args[1:], out)
	case "demo":
		return runDemo(ctx, args[1:], out)
	case "bench":
		return runBench(ctx, args[1:], out)
	case "version", "--version":
		fmt.Fprintln(out.stdout, version())
		return 0
	case "help", "-h", "--help":
		if len(args) > 1 && args[1] != "help" {
			return run(ctx, []string{args[1], "--help"}, out)
		}
		fmt.Fprint(out.stdout, usage)
		return 0
	default:
		fmt.Fprintf(out.stderr, "dlock: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
}

func version() string {
	v := "(devel)"
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		v = info.Main.Version
	}
	return fmt.Sprintf("dlock %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// output is where a subcommand talks to its user.
type output struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	tty            bool // stderr is a terminal: live status lines are drawn there
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progress redraws line() on the terminal every interval until stop is
// called, which clears it. Not on a terminal, it does nothing.
func (o *output) progress(interval time.Duration, line func() string) (stop func()) {
	if !o.tty {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			fmt.Fprintf(o.stderr, "\r\033[K%s", line())
			select {
			case <-done:
				fmt.Fprint(o.stderr, "\r\033[K")
				return
			case <-ticker.C:
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// newFlagSet makes a subcommand's flags; --help prints help to stdout.
func newFlagSet(name, help string, out *output) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out.stderr)
	fs.Usage = func() {
		fmt.Fprint(out.stdout, help, "\nFlags:\n")
		fs.SetOutput(out.stdout)
		fs.PrintDefaults()
		fs.SetOutput(out.stderr)
	}
	return fs
}

// parseFlags parses args; done says the subcommand should return code (help
// was asked for, or the flags were bad).
func parseFlags(fs *flag.FlagSet, args []string) (code int, done bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0, true
	case err != nil:
		return exitUsage, true
	}
	return 0, false
}
