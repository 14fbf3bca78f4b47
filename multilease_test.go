package dlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
)

// renewalGate is a go-redis hook that, once armed, holds every command or
// pipeline running script until open is called or its context ends. held
// tells how many of script's commands each holds. A renewal batch is one:
// the renewer pipelines its extends, and sends a batch of one alone. Armed
// after Lock returns, it leaves alone Lock's own confirmation of a grant
// read late, which runs the same script.
type renewalGate struct {
	script   *redis.Script
	armed    atomic.Bool
	held     chan int
	opened   chan struct{}
	openOnce sync.Once
}

func newRenewalGate(script *redis.Script) *renewalGate {
	return &renewalGate{script: script, held: make(chan int, 16), opened: make(chan struct{})}
}

func (g *renewalGate) open() { g.openOnce.Do(func() { close(g.opened) }) }

// hold holds cmds until open, or ctx's end, if armed and any runs the script.
func (g *renewalGate) hold(ctx context.Context, cmds ...redis.Cmder) {
	n := 0
	for _, cmd := range cmds {
		if runs(cmd, g.script) {
			n++
		}
	}
	if n == 0 || !g.armed.Load() {
		return
	}
	select {
	case <-g.opened:
	default:
		g.held <- n
		select {
		case <-g.opened:
		case <-ctx.Done():
		}
	}
}

func (g *renewalGate) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook holds a batch of one: parts granted over 50 ms apart (a
// loaded machine) are renewed in batches of their own.
func (g *renewalGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.hold(ctx, cmd)
		return next(ctx, cmd)
	}
}

func (g *renewalGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.hold(ctx, cmds...)
		return next(ctx, cmds)
	}
}

// A MultiLock's Extend that could send nothing (each lock's renewal was in
// flight, and the Extend's context ended while it waited its turn) cannot
// have shortened any lock: the lease keeps the deadline its locks have,
// and is not lost when a deadline the shorter TTL would have left passes.
// A single lock's lease does so (Lease.extend: "nothing was sent"), and so
// did a MultiLock's before issue 18; since, the whole lease counts the
// failed Extend as in doubt (Lease.inDoubt), pulls its own deadline in to
// what the shorter TTL would leave, and reports itself lost then, while
// every one of its locks is held and renewed.
func TestMultiLock_ExtendThatSentNothingKeepsTheDeadline(t *testing.T) {
	srv := startServer(t)
	ring := newRing(t, []*redistest.Server{srv}) // a Ring takes each name as a part of its own
	gate := newRenewalGate(scripts.MultiExtend)
	ring.AddHook(gate)
	t.Cleanup(gate.open)
	ctx := ctxFor(t, 30*time.Second)
	lease, err := newClient(t, ring, dlock.WithTTL(3*time.Second)).MultiLock(lockNames(t, 2)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gate.armed.Store(true)
	for held := 0; held < 2; { // both parts' first renewals, in one batch or two
		select {
		case n := <-gate.held:
			held += n
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of the 2 parts' renewals held after 10 s", held)
		}
	}
	before := lease.Deadline()

	sent := time.Now()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = lease.Extend(short, 300*time.Millisecond) // waits behind the held renewals, then gives up
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Extend behind the held renewals: %v; want its context's deadline", err)
	}
	if d := lease.Deadline(); d.Before(before.Add(-100 * time.Millisecond)) { // Deadline reads the clocks anew: ns apart
		t.Fatalf("an Extend that sent nothing pulled the deadline in by %v (to %v after its sending)",
			before.Sub(d), d.Sub(sent))
	}
	// Past what 300 ms would have left, and well inside the locks' own
	// deadlines (3 s from the grant, renewed at 1 s): still held.
	time.Sleep(time.Until(sent.Add(500 * time.Millisecond)))
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost after an Extend that sent nothing, its locks held: %v", err)
	}
	gate.open()
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
