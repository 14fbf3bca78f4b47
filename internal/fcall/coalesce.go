package fcall

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Coalescer sends concurrent acquires and releases of one Client in shared
// pipelines, saving system calls: while coalesceFlights round trips are in
// flight, callers queue for the next; with none, a call goes straight out.
type Coalescer struct {
	rdb redis.UniversalClient
	fns *Functions

	mu      sync.Mutex
	queue   []*queuedCall
	flights int
}

const (
	coalesceFlights = 2   // round trips in flight at once
	coalesceBatch   = 256 // scripts in one pipeline at most
)

// NewCoalescer is a Coalescer of calls to rdb, sent as fns says.
func NewCoalescer(rdb redis.UniversalClient, fns *Functions) *Coalescer {
	return &Coalescer{rdb: rdb, fns: fns}
}

// queuedCall waits for the next flight; done is closed once its reply is in.
type queuedCall struct {
	Call
	done chan struct{}
}

// Send sends script's command argv, as the function [Send] would alone,
// but through q. A caller whose ctx ends while its call waits gets ctx's
// error; the call may still go out, an outcome unknown as any lost reply's.
func (q *Coalescer) Send(ctx context.Context, script *redis.Script, argv []any) *redis.Cmd {
	q.mu.Lock()
	if q.flights < coalesceFlights && len(q.queue) == 0 {
		q.flights++
		q.mu.Unlock()
		cmd := sendScript(ctx, q.fns, q.rdb, script, argv)
		q.landed()
		return cmd
	}
	call := &queuedCall{Call: Call{Script: script, Argv: argv}, done: make(chan struct{})}
	q.queue = append(q.queue, call)
	q.mu.Unlock()
	select {
	case <-call.done:
		return call.Cmd
	case <-ctx.Done():
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
}

// landed ends a flight: its slot takes the queue, if any, as the next.
func (q *Coalescer) landed() {
	q.mu.Lock()
	if len(q.queue) == 0 {
		q.flights--
		q.mu.Unlock()
		return
	}
	n := min(len(q.queue), coalesceBatch)
	batch := q.queue[:n:n]
	q.queue = append([]*queuedCall(nil), q.queue[n:]...)
	q.mu.Unlock()
	go q.fly(batch)
}

// fly sends one batch as a pipeline.
func (q *Coalescer) fly(batch []*queuedCall) {
	defer q.landed()
	calls := make([]Call, len(batch))
	for i, queued := range batch {
		calls[i] = queued.Call
	}
	// The context is shared by callers: none of theirs may cut it short.
	Send(context.Background(), q.fns, q.rdb, calls)
	for i, queued := range batch {
		queued.Cmd = calls[i].Cmd
		close(queued.done)
	}
}
