//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// An unexplained loss also says when its lease's commands were sent and
// answered, as its process's Client saw them (the trace is the outermost
// hook, over the faults'), and whether commands waited for one of the
// connection pool's connections: a renewal sent late is its renewer's,
// or its process's, one sent in time and answered late the server's or
// the way back's.

// tracedKept: the last commands of a process kept, more than it sends in
// two TTLs.
const tracedKept = 1024

// tracedCmd is one command, described only if a loss is told, and when it
// was sent and answered.
type tracedCmd struct {
	cmd            redis.Cmder
	pipelined      bool
	sent, answered time.Time
	err            error
}

// commandTrace is a go-redis hook that keeps a process's last commands.
type commandTrace struct {
	mu   sync.Mutex
	ring []tracedCmd
	next int
}

func newCommandTrace() *commandTrace { return &commandTrace{ring: make([]tracedCmd, 0, tracedKept)} }

func (t *commandTrace) add(c tracedCmd) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.ring) < tracedKept {
		t.ring = append(t.ring, c)
		return
	}
	t.ring[t.next] = c
	t.next = (t.next + 1) % tracedKept
}

// describe is cmd's name and arguments, keys first: an FCALL's function
// (an EVALSHA's script) and key count left out.
func describe(cmd redis.Cmder) string {
	args := cmd.Args()
	from := 1
	if n := cmd.Name(); n == "fcall" || n == "evalsha" || n == "eval" {
		from = 3
	}
	var b strings.Builder
	b.WriteString(cmd.Name())
	for i := from; i < len(args) && b.Len() < 160; i++ {
		fmt.Fprintf(&b, " %v", args[i])
	}
	return b.String()
}

func (t *commandTrace) DialHook(next redis.DialHook) redis.DialHook { return next }

func (t *commandTrace) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		sent := time.Now()
		err := next(ctx, cmd)
		t.add(tracedCmd{cmd, false, sent, time.Now(), err})
		return err
	}
}

func (t *commandTrace) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		sent := time.Now()
		err := next(ctx, cmds)
		answered := time.Now()
		for _, cmd := range cmds {
			t.add(tracedCmd{cmd, true, sent, answered, cmd.Err()})
		}
		return err
	}
}

// about is the commands naming any of names sent from from on, oldest
// first, each timed from deadline.
func (t *commandTrace) about(names []string, from, deadline time.Time) string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	ms := func(at time.Time) string { return at.Sub(deadline).Round(time.Millisecond).String() }
	var b strings.Builder
	for i := range t.ring {
		c := t.ring[(t.next+i)%len(t.ring)]
		if c.sent.Before(from) {
			continue
		}
		what := describe(c.cmd)
		if !namesAny(what, names) {
			continue
		}
		if c.pipelined {
			what = "(pipelined) " + what
		}
		fmt.Fprintf(&b, " [%s sent %s answered %s", what, ms(c.sent), ms(c.answered))
		if c.err != nil {
			fmt.Fprintf(&b, " %v", c.err)
		}
		b.WriteString("]")
	}
	if b.Len() == 0 {
		return " none"
	}
	return b.String()
}

// quickFailure describes the first renewal naming any of names, sent
// from from on, that came back with an error before deadline and sooner
// than quickFailed after it was sent, an error that is no timeout nor a
// reload (timedOutOrReloaded): a starved process does not fail its
// renewals that way, though a dlock that sent a bad renewal would. "" if
// none.
func (t *commandTrace) quickFailure(names []string, from, deadline time.Time) string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.ring {
		c := t.ring[(t.next+i)%len(t.ring)]
		if c.err == nil || c.sent.Before(from) || !c.answered.Before(deadline) || c.answered.Sub(c.sent) >= quickFailed || timedOutOrReloaded(c.err) {
			continue
		}
		if args := c.cmd.Args(); len(args) < 2 || !renewalSHAs[argString(args[1])] || !namesAny(describe(c.cmd), names) {
			continue
		}
		return fmt.Sprintf("%s sent %v before its deadline, failed %v later: %v", describe(c.cmd),
			deadline.Sub(c.sent).Round(time.Millisecond), c.answered.Sub(c.sent).Round(time.Millisecond), c.err)
	}
	return ""
}

// timedOutOrReloaded: an error a starved process may see sooner than
// quickFailed after the trace saw its command sent (the context is made
// before, its deadline maybe another lease's), or one dlock answers by
// loading the script and sending the command again (NOSCRIPT, after a
// SCRIPT FLUSH): neither tells a renewal gone wrong.
func timedOutOrReloaded(err error) bool {
	return isTimeout(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		missingScript(err)
}

// quickFailed is how soon a renewal's error comes back for it to be no
// timeout's: a renewal's context's shortest life.
const quickFailed = dlock.MinTTL / 4

// namesAny: a command described by what has a key of a lock of names,
// whose name is the key's hash tag (a lock m1's, not m10's).
func namesAny(what string, names []string) bool {
	for _, name := range names {
		if strings.Contains(what, "{"+name+"}") {
			return true
		}
	}
	return false
}

// poolWaits tells how often, and how long in all, rdb's commands waited
// for a connection of its pool, and how many gave up.
func poolWaits(rdb redis.UniversalClient) string {
	type stater interface{ PoolStats() *redis.PoolStats }
	s, ok := rdb.(stater)
	if !ok {
		return ""
	}
	st := s.PoolStats()
	return fmt.Sprintf("pool: %d conns, %d waits for one (%v in all), %d timed out", st.TotalConns, st.WaitCount,
		time.Duration(st.WaitDurationNs).Round(time.Millisecond), st.Timeouts)
}
