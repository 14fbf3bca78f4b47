package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/observe"
	"golang.org/x/sys/unix"
)

const runUsage = `Usage: dlock run [flags] NAME [flags] -- COMMAND [ARGS...]

Runs COMMAND while holding the lock NAME: a distributed flock(1). Waits for
the lock (up to --wait), runs the command with DLOCK_NAME and DLOCK_TOKEN (the
fencing token) in its environment, renews the lock while it runs, releases it
when it exits, and exits with the command's exit code. Flags may come before
or after NAME, not after "--". NAME must come before "--": dlock run -- echo
hi is a usage error (exit 2), not a lock named echo.

dlock, its guard and the command are one job of the shell, as with
flock(1): they run in dlock's process group, and dlock never touches the
terminal: ^Z stops them all, fg and bg continue them all, ^C reaches
them all. The lock is held until every process the command started has
exited: a command that leaves a process running in the background (sh -c
'worker &'), even out of dlock's group (setsid, a job of a shell with
set -m; on Linux only), keeps the lock until it ends, as flock(1) does
through the descriptor they inherit. --release-on-exit releases when
the command's main process exits instead. Once the main process has
exited, dlock says that it holds the lock for the processes left, and
the pid of the guard they run below; ^C or ^\ at the terminal then ends
the hold: SIGTERM to them, SIGKILL after --kill-grace, exit 128+N.

The command runs under a guard, dlock's own binary (dlock-guard in ps), its
parent. The guard kills every process of the command (SIGKILL) when dlock
dies, even by kill -9, and at the lease's deadline if dlock stops renewing
the lock (SIGSTOP, ^Z past the TTL), so that none of it runs on without
the lock; no job control stops the guard, and on a loss dlock kills them
too. On Linux the guard is their subreaper: none escapes it, whatever
group or session it moves to, and it finds them by parent, never by
process group (dlock's, maybe its caller's). Elsewhere it knows only the
command's main process. The guard killed alone by signal N, dlock kills
the command, releases and exits 128+N.
Both dlock and the guard killed or stopped (pkill dlock matches
dlock-guard too), the command runs on, and the lock expires within
--ttl. dlock kills only what it may signal: a process of the command
running as another user (sudo, a set-user-ID program) runs on; on a
loss dlock names it and exits 76. Run dlock as that user instead: sudo
dlock run deploy -- ./deploy.sh, not dlock run deploy -- sudo
./deploy.sh. The command inherits dlock's descriptors 3, 4, … unchanged.

If the lock is lost while the command runs (someone forced it open, or
Redis could not be reached until the lease's deadline: at most --ttl after
its last renewal), every process of the command is killed at once: someone
else may hold the lock from then on. With Redis unreachable, the command
gets SIGTERM --kill-grace before that deadline (but not before renewals
have failed for half the TTL), to stop cleanly. Either way dlock exits 76
once the command has. A lock found lost at the release, after the
command ended: said, exit 76. A release Redis did not confirm: said, and
the command's code (the lock expires within its TTL). Not acquired
within --wait: exit 75. SIGINT, SIGTERM, SIGHUP and SIGQUIT reach every
process of the command once (on Linux; elsewhere its main process): sent
to dlock alone, dlock passes them on; sent to the job's group (^C, kill
%1, timeout), the guard passes them on only to those out of the group.
While dlock waits for the lock the first three withdraw it from the
queue and dlock exits 128+N.

The lock is the write side of an RWMutex (a ReentrantMutex) of that name;
--shared takes its read side instead, so that shared runs overlap with each
other but never with an exclusive one. Go programs use the same lock through
dlock's RWMutex or ReentrantMutex of the same name. --permits N takes a
permit of the Semaphore of that name instead: N runs at once (consul lock
-n N), as with a Go Semaphore of N permits; N is 1 to 2^53-1.

flock(1)'s short flags work, grouped as flock takes them (-ns, -nE 0, -w5):
-n (--wait 0), -w (--wait, in seconds or a duration), -s (--shared), -E
(--conflict-exit-code), -x and -e (exclusive, the default: after -s, they
undo it, as in flock). consul lock -n N is --permits N here: -n takes no
value, and a number after it is refused (exit 2), not taken for NAME.

While dlock waits, a status line on a terminal shows who holds the lock,
cut to the terminal's width. Elsewhere (a CI log) dlock says in one line
that it waits and who holds the lock, and in another when it has it.
--quiet says neither.

Exit codes: the command's (128+N if signal N killed it); 75 not acquired
within --wait (--conflict-exit-code N: N, as flock -E; --quiet: say nothing
of it); 76 the lock was lost, or a process dlock may not kill ran on; 69
Redis unreachable; 77 Redis refused the login or a command (password,
ACL); 2 bad flags or Redis address; 126 the command could not be
started, 127 not found; 128+N a signal N while waiting, or one that
killed the guard alone.

Examples:
  # in every host's crontab: the report runs once, wherever the lock is free
  */5 * * * * dlock run --wait 0 nightly-report -- /usr/local/bin/report
  # deploy steps queue up rather than overlap; give up after 10 minutes
  dlock run --wait 10m deploy:web -- ./deploy.sh
  # many readers of a dataset at once, never during a rebuild
  dlock run --shared dataset -- ./query.sh
  dlock run dataset -- ./rebuild.sh
  # at most 3 backups at once; flock's habits
  dlock run --permits 3 backups -- ./backup.sh
  dlock run -nE 0 nightly -- ./report
`

func defineRun(fs *flag.FlagSet) action {
	redisFlag := fs.String("redis", "", redisFlagUsage)
	ttl := fs.Duration("ttl", dlock.DefaultTTL, "how long the lock outlives dlock if it dies; renewed every TTL/3")
	var wait time.Duration
	waitSet := false
	fs.Func("wait", "how long to wait for the lock, a `duration` or seconds (flock -w); 0: try once (default: wait forever)", func(s string) error {
		d, err := time.ParseDuration(s)
		if seconds, errSeconds := strconv.ParseFloat(s, 64); errSeconds == nil && seconds <= math.MaxInt64/1e9 {
			d, err = time.Duration(seconds*float64(time.Second)), nil
		}
		if err != nil || d < 0 {
			return fmt.Errorf("want a duration of 0 or more, such as 30s or 10m, or seconds")
		}
		wait, waitSet = d, true
		return nil
	})
	const tryOnce = "try once, as --wait 0 (flock -n); for consul lock -n N, use --permits N"
	fs.BoolFunc("n", tryOnce, func(s string) error {
		if on, err := strconv.ParseBool(s); err != nil {
			return errors.New(tryOnce)
		} else if on {
			wait, waitSet = 0, true
		}
		return nil
	})
	shared := fs.Bool("shared", false, "take a shared (read) lock: shared runs may overlap")
	permits := 0 // not a Semaphore
	fs.Func("permits", "run under a Semaphore of `N` permits: N runs at once (consul lock -n)", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPermits {
			return fmt.Errorf("want a number of permits from 1 to %d", maxPermits)
		}
		permits = n
		return nil
	})
	grace := fs.Duration("kill-grace", 10*time.Second, "with Redis unreachable, how long before the lease's deadline the command gets SIGTERM (SIGKILL at it); after a ^C that ends a hold, before SIGKILL")
	releaseOnExit := fs.Bool("release-on-exit", false,
		"release when COMMAND's main process exits, not when the last process it started does")
	quiet := fs.Bool("quiet", false, "say nothing of waiting, nor when the lock is busy (not acquired within --wait)")
	conflictCode := exitNotAcquired
	fs.Func("conflict-exit-code", "the exit code `N` when the lock is busy, 0 to 255 (flock -E; default 75)", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 255 {
			return errors.New("want an exit code from 0 to 255")
		}
		conflictCode = n
		return nil
	})
	infoText := fs.String("info", "", "a note stored with the hold beside host, pid and program, shown by status (who, which job)")
	alias(fs, "w", "wait")
	alias(fs, "s", "shared")
	alias(fs, "E", "conflict-exit-code")
	exclusiveFlags(fs)
	return func(ctx context.Context, fs *flag.FlagSet, out *output) int {
		name, command, code, done := parseRunArgs(fs, out)
		if done {
			return code
		}
		switch {
		case *ttl < dlock.MinTTL:
			return usageError(out, "run", "--ttl must be at least %v", dlock.MinTTL)
		case *grace < 0:
			return usageError(out, "run", "--kill-grace must not be negative")
		case permits > 0 && *shared:
			return usageError(out, "run", "--permits and --shared do not go together: a Semaphore has no shared side")
		}
		return runLocked(ctx, name, command, runSettings{redis: *redisFlag, ttl: *ttl, wait: wait, waitSet: waitSet,
			shared: *shared, permits: permits, grace: *grace, releaseOnExit: *releaseOnExit, quiet: *quiet,
			conflictCode: conflictCode, info: *infoText}, out)
	}
}

// maxPermits is the most permits --permits takes: a Semaphore's number
// is a Lua number in Redis, exact up to 2^53-1; past it, stored rounded.
const maxPermits = 1<<53 - 1

// runSettings are run's flags.
type runSettings struct {
	redis         string
	ttl, wait     time.Duration
	waitSet       bool
	shared        bool
	permits       int // a Semaphore's, when not 0
	grace         time.Duration
	releaseOnExit bool
	quiet         bool
	conflictCode  int
	info          string // the --info note
}

// runLocked runs command under the lock name.
func runLocked(ctx context.Context, name string, command []string, s runSettings, out *output) int {
	// Registered before the lock is taken, so that no signal falls between
	// main's handler ending the wait and the command's start: one that
	// arrives once the lock is held is here, and the command never starts.
	signals := make(chan os.Signal, 4)
	// SIGQUIT too: ^\ reaches dlock, in the command's job, which must not
	// die of it (Go's default) and leave the command to its guard.
	signal.Notify(signals, append(stopSignals, syscall.SIGQUIT)...)
	defer signal.Stop(signals)
	// A closed output (dlock run … | head) must not kill dlock before it
	// exits with the command's code or 76. Caught, not ignored: the
	// command gets the default back at exec.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ttouIgnored := ignoreTTOU()

	holder, err := runHolderInfo(command, s.info)
	if err != nil {
		return usageError(out, "run", "--info: %v", err)
	}
	self := ownerID()
	opts := []dlock.Option{dlock.WithTTL(s.ttl), dlock.WithOwner(self), dlock.WithHolderInfo(holder)}
	if s.waitSet {
		opts = append(opts, dlock.WithWait(s.wait))
	}
	client, closeClient, code := openLocks(ctx, "run", s.redis, out, opts...)
	if client == nil {
		return code
	}
	defer closeClient()

	renewed := make(chan struct{}, 1)
	lease, err := acquire(ctx, client, name, self, s, renewed, out)
	if err != nil {
		if _, signalled := signalExit(ctx); !signalled && errors.Is(err, dlock.ErrNotAcquired) {
			if !s.quiet {
				reportBusy(client, name, self, s.wait, out)
			}
			return s.conflictCode
		}
		if errors.Is(err, dlock.ErrWrongType) {
			if held := heldAsAnotherType(client, name, s.permits > 0); held != "" {
				fmt.Fprintf(out.stderr, "dlock run: %s\n", held)
				return exitFailure
			}
		}
		return reportAcquire(ctx, name, namePermits(client, name, s.permits, err), out)
	}
	// Written after the release at the latest: a blocked stderr then holds
	// back nothing but dlock's exit.
	notes := startNotes(out.stderr)
	defer notes.flush()
	code, stopped := supervise(lease, name, command, s, ttouIgnored, signals, renewed, notes, out)
	if stopped {
		// Lost: nothing to release. Lapsing with Redis not answering
		// renewals: an attempt, waited for until the deadline at most, as
		// such a Redis would hold the exit for the clean-up's timeout.
		if lease.Err() == nil {
			released := make(chan struct{})
			go func() { _ = lease.Unlock(context.Background()); close(released) }()
			select {
			case <-released:
			case <-time.After(time.Until(lease.Deadline())):
			}
		}
		return code
	}
	// The command has ended, but a lock found gone (forced open, taken)
	// was lost while it ran: exit 76. A release Redis did not confirm
	// leaves the lock to expire: said, with the command's code.
	switch err := lease.Unlock(context.Background()); {
	case errors.Is(err, dlock.ErrNotHeld):
		notes.say("dlock run: lost the lock %q before the command ended (%s)\n",
			name, lossText(cmp.Or(lease.Err(), err), lease.Deadline()))
		return exitLost
	case err != nil:
		notes.say("dlock run: releasing %q: %s (it expires within its TTL)\n", name, releaseText(err))
	}
	return code
}

// parseRunArgs reads [flags] NAME [flags] -- COMMAND [ARGS...]. Flags may
// follow NAME up to "--" (dlock run deploy --wait 0 -- ./deploy.sh): the
// flag package stops at NAME, so what follows it is parsed again. "--" may
// be left out when COMMAND does not start with "-".
func parseRunArgs(fs *flag.FlagSet, out *output) (name string, command []string, code int, done bool) {
	rest := fs.Args()
	if len(rest) > 0 {
		name, rest = rest[0], rest[1:]
	}
	switch {
	case len(rest) > 0 && rest[0] == "--":
		rest = rest[1:]
	case len(rest) > 0 && strings.HasPrefix(rest[0], "-"):
		dashes := slices.Index(rest, "--")
		if code, done := parseFlags(fs, rest, out); done {
			return "", nil, code, true
		}
		after := fs.Args()
		if dashes >= 0 && len(after) != len(rest)-dashes-1 {
			// The flags stopped at a word before "--": NAME is one word.
			return "", nil, usageError(out, "run", "%q after NAME %q: want [flags] NAME [flags] -- COMMAND [ARGS...]",
				after[0], name), true
		}
		rest = after
	}
	if name == "" || len(rest) == 0 {
		return "", nil, usageError(out, "run", "want NAME -- COMMAND [ARGS...]"), true
	}
	return name, rest, 0, false
}

// ownerID is this run's owner id: host, process and 128 random bits.
// Status shows its OwnerHash, and the host and pid (the holder info): the
// random part keeps the id from being guessed back from them.
func ownerID() string {
	host, _ := os.Hostname()
	var b [16]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/pid-%d/%s", printable(host), os.Getpid(), hex.EncodeToString(b[:]))
}

// runHolderInfo is what a run stores with its hold for status to show:
// this host, dlock's pid (the command starts once the lock is held), the
// command's program name, and the --info note.
func runHolderInfo(command []string, note string) (admin.HolderInfo, error) {
	info := admin.ThisProcess()
	info.Program = clip(strings.ToValidUTF8(filepath.Base(command[0]), "?"), 64)
	info.Hostname = clip(strings.ToValidUTF8(info.Hostname, "?"), 64)
	info.User = note
	if !utf8.ValidString(note) {
		return info, errors.New("not valid UTF-8")
	}
	if b, _ := json.Marshal(info); len(b) > admin.MaxHolderInfo {
		return info, fmt.Errorf("too long: the holder info may take %d bytes as JSON", admin.MaxHolderInfo)
	}
	return info, nil
}

// quoteCut is name quoted, cut to 100 bytes: one refused for its length
// may be huge.
func quoteCut(name string) string {
	if len(name) > 100 {
		return strconv.Quote(clip(name, 100)) + "…"
	}
	return strconv.Quote(name)
}

// clip cuts s to at most n bytes, at a rune boundary.
func clip(s string, n int) string {
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// acquire takes the lock. Once it has to wait (unless quiet), it draws a
// status line on a terminal; elsewhere, as in a CI log, it says in one line
// that it waits and for whom, and in another when it has the lock. Each
// confirmed renewal of the lease is sent on renewed, without blocking.
func acquire(ctx context.Context, client *dlock.Client, name, self string, s runSettings, renewed chan<- struct{},
	out *output) (*dlock.Lease, error) {
	waiting := make(chan struct{})
	var once sync.Once
	waits := dlock.WithObserver(&observe.Observer{
		Wait: func(context.Context, observe.WaitEvent) { once.Do(func() { close(waiting) }) },
		Renewal: func(ev observe.RenewalEvent) {
			if ev.Result == observe.RenewalOK {
				select {
				case renewed <- struct{}{}:
				default: // one pending is enough: the guard reads the latest deadline
				}
			}
		},
	})
	lock := client.RWMutex(name, waits).Lock
	switch {
	case s.permits > 0:
		lock = client.Semaphore(name, s.permits, waits).Acquire
	case s.shared:
		lock = client.RWMutex(name, waits).RLock
	}
	if s.quiet {
		return lock(ctx)
	}
	started := time.Now()
	done := make(chan struct{})
	reported := make(chan bool, 1) // whether it said it waits
	go func() {
		select {
		case <-done:
			reported <- false
			return
		case <-waiting:
		}
		if out.tty {
			stop := out.progress(time.Second, func() string {
				return waitingLine(ctx, client, name, self, time.Since(started))
			})
			<-done
			stop()
			reported <- false
			return
		}
		fmt.Fprintf(out.stderr, "dlock run: waiting for %q%s\n", name, heldBy(client, name, self))
		reported <- true
	}()
	lease, err := lock(ctx)
	close(done)
	if <-reported && err == nil {
		fmt.Fprintf(out.stderr, "dlock run: acquired %q after %v\n", name, time.Since(started).Round(100*time.Millisecond))
	}
	return lease, err
}

// heldBy is ", held by …" naming the holders of name but self, or "".
func heldBy(client *dlock.Client, name, self string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if info, err := client.Describe(ctx, name); err == nil && len(others(info.Holders, self)) > 0 {
		return ", " + holdersPhrase(info, self)
	}
	return ""
}

// heldAsAnotherType says which type of dlock's holds name, where the run's
// own type found keys it does not write: a Go program's Mutex, say. "" when
// Describe does not know the keys either.
func heldAsAnotherType(client *dlock.Client, name string, semaphore bool) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := client.Describe(ctx, name)
	lockType := typeName(info.Kind)
	if err != nil || lockType == "" {
		return ""
	}
	article := "a"
	if strings.ContainsRune("AEIOUR", rune(lockType[0])) { // an RWMutex, an Election
		article = "an"
	}
	takes := "dlock run takes an RWMutex"
	switch {
	case semaphore:
		takes = "dlock run --permits takes a Semaphore"
	case info.Kind == observe.KindSemaphore:
		takes += "; --permits N takes a Semaphore"
	}
	return fmt.Sprintf("%q is %s %s, %s: %s", name, article, typeLabel(lockType), stateOf(info), takes)
}

// reportBusy says who holds the lock that --wait gave up on.
func reportBusy(client *dlock.Client, name, self string, wait time.Duration, out *output) {
	within := "within --wait " + wait.String()
	if wait == 0 {
		within = "(--wait 0)"
	}
	fmt.Fprintf(out.stderr, "dlock run: %q is busy%s: not acquired %s\n", name, heldBy(client, name, self), within)
}

// waitingLine is the status line of a run waiting for name. It names the
// holders but the run itself (self): the run holds the lock once its Lock
// returns, which may be while the line is drawn, and a shared run may hold
// beside the readers it then waits behind.
func waitingLine(ctx context.Context, client *dlock.Client, name, self string, waited time.Duration) string {
	line := fmt.Sprintf("dlock: waiting for %q for %v", name, waited.Round(time.Second))
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := client.Describe(ctx, name)
	holders := others(info.Holders, self)
	if err != nil || len(holders) == 0 {
		return line
	}
	return fmt.Sprintf("%s; %s (renewed; lapses within %v of its holder's death)", line, holdersPhrase(info, self),
		info.TTL.Round(100*time.Millisecond))
}

// others are the holders but the owner self.
func others(holders []admin.Holder, self string) []admin.Holder {
	var rest []admin.Holder
	for _, h := range holders {
		if h.Owner != admin.OwnerHash(self) {
			rest = append(rest, h)
		}
	}
	return rest
}

// holdersPhrase is "held by …" naming the holders of a lock but self (as
// ls does), or "N of M permits held" for a Semaphore; escaped.
func holdersPhrase(info admin.LockInfo, self string) string {
	if info.Permits > 0 {
		return permitsText(info)
	}
	holders := others(info.Holders, self)
	parts := make([]string, 0, len(holders))
	for _, h := range holders {
		label := holderLabel(h)
		if label == hiddenOwner {
			label = "a Mutex holder"
		}
		parts = append(parts, fmt.Sprintf("%s (%s ×%d)", label, modeName(h), h.Holds))
	}
	return "held by " + printable(strings.Join(parts, ", "))
}

func modeName(h admin.Holder) string {
	if h.Write {
		return "write"
	}
	return "read"
}

func reportAcquire(ctx context.Context, name string, err error, out *output) int {
	if code, ok := signalExit(ctx); ok {
		// Lock has withdrawn the waiter from the queue before returning.
		fmt.Fprintf(out.stderr, "dlock run: %q: stopped waiting: %v\n", name, context.Cause(ctx))
		return code
	}
	text := errText(err)
	if !strings.Contains(text, strconv.Quote(name)) {
		text = quoteCut(name) + ": " + text
	}
	fmt.Fprintf(out.stderr, "dlock run: %s\n", text)
	return exitCodeOf(ctx, err)
}

// supervise runs command while lease holds, and returns the exit code:
// the command's main process's. Unless --release-on-exit, it returns once
// every process of the command has exited, as flock(1) holds its lock
// while any process that inherited the descriptor runs. The command runs
// under a guard (guard.go), which dlock tells the lease's deadline.
// signals delivers what dlock is sent: passed on to the guard, which
// passes it on to the command; renewed, the lease's renewals. stopped
// says the command was stopped for the lease's end (exit 76).
func supervise(lease *dlock.Lease, name string, command []string, s runSettings, ttouIgnored bool,
	signals <-chan os.Signal, renewed <-chan struct{}, notes *notes, out *output) (code int, stopped bool) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = out.stdin, out.stdout, out.stderr
	cmd.Env = append(os.Environ(), "DLOCK_NAME="+name, "DLOCK_TOKEN="+strconv.FormatUint(lease.Token(), 10))

	select {
	case sig := <-signals: // while dlock took the lock: the command has not started
		notes.say("dlock run: %q: not run: %v\n", name, signalled{sig.(syscall.Signal)})
		return 128 + int(sig.(syscall.Signal)), false
	default:
	}
	// The guard's orphans come to dlock if the guard is killed alone.
	becomeSubreaper()
	guard, err := guardCmd(cmd, s.releaseOnExit, ttouIgnored)
	if err != nil {
		notes.say("dlock run: %q: not run: %v\n", name, err)
		return exitCannotRun, false
	}
	defer guard.close()
	err = cmd.Start()
	guard.started()
	if err != nil {
		notes.say("dlock run: %s\n", startError(err))
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound, false
		}
		return exitCannotRun, false
	}
	signal.Ignore(syscall.SIGTTOU) // as on Linux from the start (ignoreTTOU)
	guardPid := cmd.Process.Pid
	// The deadline moves at each renewal (every TTL/3).
	every := min(max(s.ttl/10, 10*time.Millisecond), time.Second)
	guard.follow(lease.Deadline, every, renewed)
	pauseBeforeWatch(guardPid)
	foreign := foreignSet{} // dlock's children it did not start, kept at each tick
	foreign.add(guardPid)
	guard.run()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// Each tick looks whether the command must be warned: SIGTERM
	// --kill-grace before the deadline, but never before renewals have
	// failed for half the TTL (they go every TTL/3).
	tick := time.NewTicker(every)
	defer tick.Stop()
	warnBefore := min(s.grace, s.ttl/2)
	lost := lease.Done()
	// A tick TTL/3 late (they come every TTL/10 at most) says dlock was
	// stopped, or starved of CPU: a deadline that passed then is not
	// Redis's doing.
	lastTick, stalled := time.Now(), false
	killed := false  // by dlock, for a loss: the guard with the command
	expired := false // the guard killed the command at the deadline it read
	done := false    // the guard said it waited for every process it had to
	// Once the main process has exited, a ^C or ^\ at the terminal ends
	// the hold for the processes it left, which may ignore it (sh's &):
	// SIGTERM, then SIGKILL after --kill-grace, and exit 128+N.
	mainExited, interrupted := false, syscall.Signal(0)
	var graceOver <-chan time.Time
	said := guard.said
	loss := func() string {
		err := lease.Err()
		if (stalled || time.Since(lastTick) > s.ttl/3) && (err == nil || errors.Is(err, dlock.LossUnreachable)) {
			return "no renewal went out before the lease's deadline: dlock was stopped"
		}
		if err == nil {
			return "its deadline passed before a renewal" // the lease's timer has yet to say so
		}
		return lossText(err, lease.Deadline())
	}
	for {
		select {
		case <-exited:
			code = exitCode(cmd)
			for report := range drained(said) { // those the guard made before it exited
				expired = expired || report == "expired"
				done = done || strings.HasPrefix(report, "done ")
			}
			// Continued past the deadline, dlock may learn of the exit (the
			// guard's kill at the deadline) before the lease's timer fires.
			ended := lease.Err() != nil || !time.Now().Before(lease.Deadline())
			said := ended && lost != nil // the loss, with what was killed
			// The guard exits with the command's code once it has said
			// "done": it waited for all (but with --release-on-exit, whose
			// leftovers run on), and dlock's children are its caller's,
			// not to be killed. Any other end (a signal, a crash, which Go
			// ends with exit 2) has left the command to run on.
			var unkilled []int
			if !done && !killed {
				unkilled = killAll(nil, foreign)
				end := fmt.Sprintf("exited %d before the command ended", code)
				if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					end = "was killed by " + unix.SignalName(ws.Signal())
				} else {
					code = exitGuardFailed // a crash: its own code (Go's 2) would read as a usage error
				}
				what := fmt.Sprintf("killed the command with it: exit %d", code) // 128+N for the guard's signal N
				if len(unkilled) > 0 {
					what = killedText(unkilled) // exit 76
				}
				notes.say("dlock run: dlock-guard (pid %d) %s, not by dlock; %s\n", guardPid, end, what)
			}
			if said {
				killedBy := "" // the command may have ended on its own
				if expired || len(unkilled) > 0 {
					killedBy = "; " + killedText(unkilled)
				}
				notes.say("dlock run: lost the lock %q (%s)%s\n", name, loss(), killedBy)
			} else if stopped && !killed {
				notes.say("dlock run: the command ended (%d) before the lock %q lapsed; exit 76, as it could not be renewed\n", code, name)
			}
			if ended || stopped || expired || len(unkilled) > 0 {
				return exitLost, true
			}
			if interrupted != 0 {
				return 128 + int(interrupted), false
			}
			return code, false
		case got := <-signals:
			sig := got.(syscall.Signal)
			guard.pass(sig)
			// Once the main process has exited, ^C or ^\ stops the
			// processes it left, which ignore them (sh's & children).
			if mainExited && interrupted == 0 && !stopped && (sig == syscall.SIGINT || sig == syscall.SIGQUIT) {
				interrupted = sig
				guard.send(syscall.SIGTERM)
				graceOver = time.After(s.grace)
				notes.say("dlock run: %s: stopping the processes the command left (SIGTERM, SIGKILL in %v)\n",
					keyOf(interrupted), s.grace)
			}
		case <-graceOver:
			graceOver = nil
			foreign.add(guardPid)
			if runtime.GOOS != "linux" {
				guard.pipe.Close() // as on a loss
			}
			if unkilled := killAll(nil, foreign); len(unkilled) > 0 {
				notes.say("dlock run: %s\n", killedText(unkilled))
			}
			killed = true
		case report, ok := <-said:
			if !ok {
				said = nil
				continue
			}
			expired = expired || report == "expired"
			done = done || strings.HasPrefix(report, "done ")
			// Stopped for an unreachable Redis, the processes left are
			// about to be killed, not held for.
			if exit, ok := strings.CutPrefix(report, "exited "); ok && !stopped {
				mainExited = true
				foreign.add(guardPid)
				sayHolding(name, exit, guardPid, foreign, out.tty, notes)
			}
		case <-tick.C:
			foreign.add(guardPid)
			stalled = time.Since(lastTick) > s.ttl/3 // the loss that follows a stop comes with this tick
			lastTick = time.Now()
			deadline := lease.Deadline()
			// A late tick is judged by the next: the renewal overdue since
			// the stall goes out now, and may well move the deadline.
			if left := time.Until(deadline); !stalled && !stopped && left <= warnBefore && lease.Err() == nil {
				guard.send(syscall.SIGTERM)
				notes.say("dlock run: the lock %q could not be renewed and lapses in %v; stopping the command (SIGTERM, SIGKILL then)\n",
					name, left.Round(time.Millisecond))
				stopped = true
			}
		case <-lost:
			// Someone may hold the lock already: nothing of the command
			// may run on, not even for --kill-grace. dlock kills it itself,
			// the guard too: a stopped guard would kill nothing.
			foreign.add(guardPid)
			if runtime.GOOS != "linux" {
				guard.pipe.Close() // dlock finds none of the command here: the guard kills it
			}
			unkilled := killAll(nil, foreign)
			notes.say("dlock run: lost the lock %q (%s); %s\n", name, loss(), killedText(unkilled))
			lost, stopped, killed = nil, true, true
		}
	}
}

// drained is said, or a closed channel for nil (all read already).
func drained(said chan string) chan string {
	if said == nil {
		said = make(chan string)
		close(said)
	}
	return said
}

// sayHolding says, once the command's main process has exited with code
// exit, that the run holds the lock for the processes it left, if any,
// and under which guard they run: which they are would be stale as soon
// as said (they end, fork, exec).
func sayHolding(name, exit string, guard int, foreign foreignSet, tty bool, notes *notes) {
	if !slices.ContainsFunc(commandProcesses(nil, foreign), func(pid int) bool { return pid != guard }) {
		return
	}
	stop := ""
	if tty {
		stop = "; ^C to stop them"
	}
	notes.say("dlock run: command exited (%s); holding %q until the processes it left have ended (below dlock-guard, pid %d)%s\n",
		exit, name, guard, stop)
}

// keyOf is the key that sends sig from the terminal.
func keyOf(sig syscall.Signal) string {
	if sig == syscall.SIGQUIT {
		return "^\\"
	}
	return "^C"
}

// notes writes dlock's lines during a run, in order, from a goroutine of
// its own: a blocked stderr (a pipe nobody reads, ^S on a terminal) holds
// back the lines, never the loop that kills at a loss and passes signals on.
type notes struct {
	lines chan string
	done  chan struct{}
}

func startNotes(w io.Writer) *notes {
	n := &notes{lines: make(chan string, 16), done: make(chan struct{})}
	go func() {
		defer close(n.done)
		for line := range n.lines {
			_, _ = io.WriteString(w, line)
		}
	}()
	return n
}

// say queues a line. A run says a handful, fewer than the queue holds;
// were it full, the line would be dropped rather than block.
func (n *notes) say(format string, args ...any) {
	select {
	case n.lines <- fmt.Sprintf(format, args...):
	default:
	}
}

// flush waits until every line queued is written.
func (n *notes) flush() {
	close(n.lines)
	<-n.done
}

// killedText says what killAll did: killed the command, or which of its
// processes it may not kill (another user's: sudo, a set-user-ID
// program), which run on without the lock.
func killedText(unkilled []int) string {
	if len(unkilled) == 0 {
		return "killed the command"
	}
	named := make([]string, len(unkilled))
	for i, pid := range unkilled {
		named[i] = fmt.Sprintf("%d (%s)", pid, processName(pid))
	}
	return fmt.Sprintf("could not kill %s: not permitted, another user's (run dlock as that user); killed the rest, but these run on without the lock",
		strings.Join(named, ", "))
}

// exitCode is the shell's view of how the command ended.
func exitCode(cmd *exec.Cmd) int {
	if state := cmd.ProcessState; state != nil {
		return statusCode(state.Sys().(syscall.WaitStatus))
	}
	return exitCannotRun
}

// statusCode is the shell's view of a wait status.
func statusCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// pauseBeforeWatchEnv names a file to which dlock, started by a test, writes
// the guard's pid and then stops for ever before telling it to run the
// command: the test kills dlock in that gap.
const pauseBeforeWatchEnv = "DLOCK_TEST_PAUSE_BEFORE_WATCH"

func pauseBeforeWatch(pid int) {
	if path := os.Getenv(pauseBeforeWatchEnv); path != "" {
		_ = os.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o600)
		select {}
	}
}
