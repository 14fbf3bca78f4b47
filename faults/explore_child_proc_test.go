//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/observe"
)

// The child process of the child fault (explore_child_test.go): the test
// binary run again with childEnv set, an explored client's loop whose
// steps it tells on its stdout, a line each, for the parent to record.

// childSpec is what the child is told.
type childSpec struct {
	Addrs   []string
	Cluster bool
	Ops     []op
}

// childMain runs the child when the environment asks for it, and reports
// whether it did.
func childMain() bool {
	spec := os.Getenv(childEnv)
	if spec == "" {
		return false
	}
	var c childSpec
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	runChildLoop(c)
	os.Exit(0)
	return true
}

// childOut is the child's stdout, a line at a time.
type childOut struct {
	mu  sync.Mutex
	cur atomic.Pointer[childLease] // the lease held, whose deadline renewals report
}

type childLease struct {
	i     int
	lease *dlock.Lease
}

func (w *childOut) line(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Printf(format+"\n", args...)
}

// deadline reports the held lease's deadline, read under the lock so
// that the lines come in the order the deadlines were read.
func (w *childOut) deadline() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l := w.cur.Load(); l != nil {
		fmt.Printf("deadline %d %d\n", l.i, l.lease.Deadline().UnixNano())
	}
}

// childSending is the child's go-redis hook: a line before each command.
type childSending struct{ out *childOut }

func (h childSending) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h childSending) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.out.line("sending %s", cmd.Name())
		return next(ctx, cmd)
	}
}

func (h childSending) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 {
			h.out.line("sending pipeline %s", cmds[0].Name())
		}
		return next(ctx, cmds)
	}
}

func unixNow() int64 { return time.Now().UnixNano() }

// runChildLoop is the child: an explored client's loop (runOp's), its
// steps told on stdout instead of recorded.
func runChildLoop(c childSpec) {
	out := &childOut{}
	var rdb redis.UniversalClient
	if c.Cluster {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, Username: aclUser, Password: aclPassword,
			DialTimeout: time.Second, ReadTimeout: readTimeout, WriteTimeout: time.Second,
			MaxRetries: -1, ContextTimeoutEnabled: true})
	} else {
		rdb = newRedisAt(c.Addrs[0])
	}
	rdb.AddHook(childSending{out})
	observer := &observe.Observer{Renewal: func(observe.RenewalEvent) { out.deadline() }, Wait: observedInDoubt.Wait}
	client, err := dlock.New(rdb, dlock.WithWaiterRefresh(waiterRefresh), dlock.WithObserver(observer))
	if err != nil {
		out.line("error %v", err)
		os.Exit(1)
	}
	proc := &process{client: client}
	ctx := context.Background()
	for i, o := range c.Ops {
		opts := []dlock.Option{dlock.WithTTL(o.TTL)}
		if o.Lease > 0 {
			opts = append(opts, dlock.WithLeaseTime(o.Lease))
		}
		if !o.Try {
			opts = append(opts, dlock.WithWait(o.Wait))
		} else if o.Kind == "election" {
			opts = append(opts, dlock.WithWait(0))
		}
		actx, cancel := ctx, context.CancelFunc(func() {})
		if o.Cancel > 0 {
			actx, cancel = context.WithTimeout(ctx, o.Cancel)
		}
		actx, inDoubt := withInDoubt(actx)
		out.line("asked %d %d", i, unixNow())
		lease, err := acquire(actx, proc, o, opts)
		cancel()
		ret := time.Now()
		if err != nil {
			out.line("refused %d %d %s", i, ret.UnixNano(), childErrors(err))
			continue
		}
		out.cur.Store(&childLease{i: i, lease: lease})
		valid := 0
		if lease.Err() == nil && lease.Deadline().After(ret) {
			valid = 1
		}
		var tokens []string
		for name, token := range lease.Tokens() {
			tokens = append(tokens, fmt.Sprintf("%s=%d", name, token))
		}
		out.line("granted %d %d %d %d %s %d", i, ret.UnixNano(), lease.Deadline().UnixNano(), valid, strings.Join(tokens, ","), b2i(inDoubt.Load()))
		write := func() { // without looking at the lease
			for name, token := range lease.Tokens() {
				out.line("write %d %s %d %d", i, name, token, unixNow())
			}
		}
		write() // its first act
		hold := o.Hold
		if o.Extend > 0 {
			childSleep(lease, hold/2)
			out.line("extending %d %d", i, unixNow())
			err := lease.Extend(ctx, o.Extend)
			out.line("extended %d %d %s", i, unixNow(), childErrors(err))
			out.deadline()
			hold = o.Extend + o.Extend/2
		}
		childSleep(lease, hold)
		write() // its last act under the lock: a frozen child's comes late
		out.cur.Store(nil)
		out.line("end %d %d %d %d", i, unixNow(), lease.Deadline().UnixNano(), b2i(lease.Err() != nil))
		out.line("unlocking %d %d", i, unixNow())
		err = lease.Unlock(ctx)
		out.line("unlocked %d 1 %d %s", i, unixNow(), childErrors(err))
		if o.Unlock2 && err == nil {
			out.line("unlocking %d %d", i, unixNow())
			err = lease.Unlock(ctx)
			out.line("unlocked %d 2 %d %s", i, unixNow(), childErrors(err))
		}
	}
	out.line("done")
}

func childSleep(l *dlock.Lease, d time.Duration) {
	select {
	case <-l.Done():
	case <-time.After(d):
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// childErrors is err as the sentinels it matches, comma-separated ("ok"
// for nil), and "quorum" for a Redlock's QuorumError (expectedAcquireError
// reads it), or "other:" and its text without spaces.
func childErrors(err error) string {
	if err == nil {
		return "ok"
	}
	var is []string
	for _, s := range childSentinels {
		if errors.Is(err, s.err) {
			is = append(is, s.name)
		}
	}
	if quorum := (*dlock.QuorumError)(nil); errors.As(err, &quorum) {
		is = append(is, "quorum")
	}
	if len(is) == 0 {
		return "other:" + strings.Join(strings.Fields(err.Error()), "_")
	}
	return strings.Join(is, ",")
}

var childSentinels = []struct {
	name string
	err  error
}{
	{"notacquired", dlock.ErrNotAcquired}, {"notheld", dlock.ErrNotHeld},
	{"canceled", context.Canceled}, {"deadline", context.DeadlineExceeded},
}

// parseChildErrors is childErrors' inverse: an error matching the same
// sentinels.
func parseChildErrors(s string) error {
	if s == "ok" {
		return nil
	}
	if msg, ok := strings.CutPrefix(s, "other:"); ok {
		return errors.New(strings.ReplaceAll(msg, "_", " "))
	}
	var errs []error
	for _, name := range strings.Split(s, ",") {
		if name == "quorum" {
			errs = append(errs, &dlock.QuorumError{})
		}
		for _, c := range childSentinels {
			if c.name == name {
				errs = append(errs, c.err)
			}
		}
	}
	return errors.Join(errs...)
}
