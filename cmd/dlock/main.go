// Command dlock runs distributed locks on Redis from the shell: a command
// under a lock (a distributed flock(1) for cron jobs and deploy steps), the
// state of a lock, every lock listed or watched live, a check of whether a
// Redis is fit for locks (doctor), a forced unlock, a demo and a benchmark. Run
// `dlock help` for the commands and `dlock COMMAND --help` for each; the
// same texts make `dlock man` and `dlock completion bash|zsh|fish`
// (commands.go holds them).
//
// It uses the standard library's flag package: one FlagSet per subcommand
// covers what dlock needs, and a CLI dependency would be the only one the
// library does not already have.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// Exit codes. A command run by `dlock run` passes its own through.
const (
	exitFailure      = 1   // the demo's verdict failed; a doctor check failed; the lock held a foreign value; not confirmed
	exitUsage        = 2   // bad flags or arguments
	exitRedis        = 69  // Redis could not be reached or failed (EX_UNAVAILABLE)
	exitGuardFailed  = 70  // run: the guard crashed; dlock killed the command (EX_SOFTWARE)
	exitNoPermission = 77  // Redis refused the login or a command dlock needs (EX_NOPERM)
	exitNotAcquired  = 75  // the lock was not acquired within --wait (EX_TEMPFAIL: try later)
	exitLost         = 76  // the lock was lost while the command ran; the command was stopped
	exitCannotRun    = 126 // the command could not be started
	exitNotFound     = 127 // the command was not found
)

func main() {
	// The guard's role needs its name as well as the variable: a user's
	// own environment may carry the variable, never dlock's argv[0].
	if os.Getenv(heldEnv) != "" && os.Args[0] == "dlock-guard" {
		os.Exit(guardCommand())
	}
	// go-redis logs a failed dial from its pool, several times a second while
	// Redis is down; dlock reports what failed once, in its own words.
	redis.SetLogger(silentLogger{})
	ctx, stop := signalContext(context.Background())
	out := &output{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, tty: isTerminal(os.Stderr),
		screen: terminalOrNil(os.Stdout), keyboard: terminalOrNil(os.Stdin)}
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

// output is where a subcommand talks to its user.
type output struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	tty            bool     // stderr is a terminal: live status lines are drawn there
	screen         *os.File // stdout, when it is a terminal (watch redraws it in place); else nil
	keyboard       *os.File // stdin, when it is a terminal (watch reads q from it); else nil
}

// stderrWidth is the width of the terminal stderr is, or 0.
func (o *output) stderrWidth() int {
	if f, ok := o.stderr.(*os.File); ok {
		if width, _, err := windowSize(int(f.Fd())); err == nil {
			return width
		}
	}
	return 0
}

// isTerminal says whether f is a terminal: one that has terminal
// settings to read, not merely a character device (/dev/null).
func isTerminal(f *os.File) bool {
	var settings syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), readTermios, uintptr(unsafe.Pointer(&settings)))
	return errno == 0
}

// terminalOrNil is f when it is a terminal.
func terminalOrNil(f *os.File) *os.File {
	if isTerminal(f) {
		return f
	}
	return nil
}

// progress redraws line() on the terminal every interval until stop is
// called, which clears it. The line is cut to the terminal's width: one
// that wrapped would leave a line behind at each redraw. Not on a terminal, it does nothing.
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
			fmt.Fprintf(o.stderr, "\r\033[K%s", cutTo(line(), o.stderrWidth()-1))
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
