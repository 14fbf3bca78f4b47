package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlockio/dlock"
)

const runUsage = `Usage: dlock run [flags] NAME -- COMMAND [ARGS...]

Runs COMMAND while holding the lock NAME: a distributed flock(1). Waits for
the lock (up to --wait), runs the command with DLOCK_NAME and DLOCK_TOKEN (the
fencing token) in its environment, renews the lock while it runs, releases it
when it exits, and exits with the command's exit code.

If the lock is lost while the command runs (someone forced it open, or Redis
could not be reached for longer than the TTL allows), the command gets SIGTERM,
then SIGKILL after --kill-grace, and dlock exits 76. Not acquired within
--wait: exit 75. SIGINT, SIGTERM and SIGHUP sent to dlock are passed on to the
command. The command runs in a process group of its own, so that stopping it
stops every process it started.

The lock is the write side of an RWMutex (a ReentrantMutex) of that name;
--shared takes its read side instead, so that shared runs overlap with each
other but never with an exclusive one. Go programs use the same lock through
dlock's RWMutex or ReentrantMutex of the same name.

On a terminal, a status line shows who holds the lock while dlock waits.

Examples:
  # in every host's crontab: the report runs once, wherever the lock is free
  */5 * * * * dlock run --wait 0 nightly-report -- /usr/local/bin/report
  # deploy steps queue up rather than overlap; give up after 10 minutes
  dlock run --wait 10m deploy:web -- ./deploy.sh
  # many readers of a dataset at once, never during a rebuild
  dlock run --shared dataset -- ./query.sh
  dlock run dataset -- ./rebuild.sh
`

func runRun(ctx context.Context, args []string, out *output) int {
	fs := newFlagSet("run", runUsage, out)
	redisFlag := fs.String("redis", "", "Redis URL (default: REDIS_URL, else "+defaultRedisURL+")")
	ttl := fs.Duration("ttl", dlock.DefaultTTL, "how long the lock outlives dlock if it dies; renewed every TTL/3")
	var wait time.Duration
	waitSet := false
	fs.Func("wait", "how long to wait for the lock; 0: try once (default: wait forever)", func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return fmt.Errorf("want a duration of 0 or more, such as 30s or 10m")
		}
		wait, waitSet = d, true
		return nil
	})
	shared := fs.Bool("shared", false, "take a shared (read) lock: shared runs may overlap")
	grace := fs.Duration("kill-grace", 10*time.Second, "after SIGTERM on a lost lock, how long before SIGKILL")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	rest := fs.Args()
	if len(rest) > 1 && rest[1] == "--" {
		rest = append(rest[:1:1], rest[2:]...)
	}
	if len(rest) < 2 {
		fmt.Fprintln(out.stderr, "dlock run: want NAME -- COMMAND [ARGS...]; see dlock run --help")
		return exitUsage
	}
	if *ttl < dlock.MinTTL || *grace < 0 {
		fmt.Fprintf(out.stderr, "dlock run: --ttl must be at least %v and --kill-grace not negative\n", dlock.MinTTL)
		return exitUsage
	}
	name, command := rest[0], rest[1:]

	opts := []dlock.Option{dlock.WithTTL(*ttl), dlock.WithOwner(ownerID())}
	if waitSet {
		opts = append(opts, dlock.WithWait(wait))
	}
	client, done, code := openClient(ctx, "run", *redisFlag, out, opts...)
	if client == nil {
		return code
	}
	defer done()

	lease, code := acquire(ctx, client, name, *shared, out)
	if lease == nil {
		return code
	}
	code = supervise(lease, name, command, *grace, out)
	if err := lease.Unlock(context.Background()); err != nil && lease.Err() == nil {
		fmt.Fprintf(out.stderr, "dlock run: releasing %q: %v (it expires within its TTL)\n", name, err)
	}
	return code
}

// ownerID names this run in `dlock status`: host, process and a random
// part, since process ids repeat across containers and reboots.
func ownerID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/pid-%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// acquire takes the lock, drawing a status line on a terminal while it
// waits. It returns the lease, or nil and the exit code.
func acquire(ctx context.Context, client *dlock.Client, name string, shared bool, out *output) (*dlock.Lease, int) {
	rw := client.RWMutex(name)
	lock := rw.Lock
	if shared {
		lock = rw.RLock
	}
	started := time.Now()
	stop := out.progress(time.Second, func() string {
		return waitingLine(ctx, client, name, time.Since(started))
	})
	lease, err := lock(ctx)
	stop()
	if err != nil {
		return nil, reportAcquire(name, err, out)
	}
	return lease, 0
}

func waitingLine(ctx context.Context, client *dlock.Client, name string, waited time.Duration) string {
	line := fmt.Sprintf("dlock: waiting for %q for %v", name, waited.Round(time.Second))
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := client.Describe(ctx, name)
	if err != nil || len(info.Holders) == 0 {
		return line
	}
	return fmt.Sprintf("%s; held by %s, %v left", line, describeHolders(info.Holders), info.TTL.Round(100*time.Millisecond))
}

func describeHolders(holders []dlock.Holder) string {
	parts := make([]string, 0, len(holders))
	for _, h := range holders {
		owner := h.Owner
		if owner == "" {
			owner = "a Mutex holder"
		}
		parts = append(parts, fmt.Sprintf("%s (%s ×%d)", owner, modeName(h), h.Holds))
	}
	return strings.Join(parts, ", ")
}

func modeName(h dlock.Holder) string {
	if h.Write {
		return "write"
	}
	return "read"
}

func reportAcquire(name string, err error, out *output) int {
	fmt.Fprintf(out.stderr, "dlock run: %q: %v\n", name, err)
	switch {
	case errors.Is(err, context.Canceled):
		return 128 + int(syscall.SIGINT)
	case errors.Is(err, dlock.ErrNotAcquired):
		return exitNotAcquired
	case errors.Is(err, dlock.ErrInvalid):
		return exitUsage
	case errors.Is(err, dlock.ErrWrongType):
		return exitFailure
	}
	return exitRedis
}

// supervise runs command while lease holds, and returns the exit code.
func supervise(lease *dlock.Lease, name string, command []string, grace time.Duration, out *output) int {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = out.stdin, out.stdout, out.stderr
	cmd.Env = append(os.Environ(), "DLOCK_NAME="+name, "DLOCK_TOKEN="+strconv.FormatUint(lease.Token(), 10))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(signals)

	if err := cmd.Start(); err != nil {
		fmt.Fprintf(out.stderr, "dlock run: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	group := -cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	for {
		select {
		case <-exited:
			return exitCode(cmd)
		case sig := <-signals:
			_ = syscall.Kill(group, sig.(syscall.Signal))
		case <-lease.Done():
			fmt.Fprintf(out.stderr, "dlock run: lost the lock %q (%v); stopping the command\n", name, lease.Err())
			_ = syscall.Kill(group, syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(grace):
			}
			// Whatever of the group is left, the command's children too, must
			// not go on acting as the holder.
			_ = syscall.Kill(group, syscall.SIGKILL)
			if cmd.ProcessState == nil {
				<-exited
			}
			return exitLost
		}
	}
}

// exitCode is the shell's view of how the command ended.
func exitCode(cmd *exec.Cmd) int {
	state := cmd.ProcessState
	if state == nil {
		return exitCannotRun
	}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return state.ExitCode()
}
