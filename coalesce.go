package dlock

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// coalescer sends the acquires and releases of concurrent callers of one
// Client in shared pipelines, saving system calls: while coalesceFlights
// round trips are in flight, callers queue for the next. With nothing in
// flight a call goes straight out.
type coalescer struct {
	rdb redis.UniversalClient
	fns *functions

	mu      sync.Mutex
	queue   []*queuedCall
	flights int
}

const (
	coalesceFlights = 2   // round trips in flight at once
	coalesceBatch   = 256 // scripts in one pipeline at most
)

// queuedCall waits for the next flight; done is closed once its reply is in.
type queuedCall struct {
	scriptCall
	done chan struct{}
}

// runArgv is sendScript through the coalescer. A caller whose ctx ends
// while its call waits gets ctx's error; the call may still go out, an
// outcome unknown as any lost reply's.
func (q *coalescer) runArgv(ctx context.Context, script *redis.Script, argv []any) *redis.Cmd {
	q.mu.Lock()
	if q.flights < coalesceFlights && len(q.queue) == 0 {
		q.flights++
		q.mu.Unlock()
		cmd := sendScript(ctx, q.fns, q.rdb, script, argv)
		q.landed()
		return cmd
	}
	call := &queuedCall{scriptCall: scriptCall{script: script, argv: argv}, done: make(chan struct{})}
	q.queue = append(q.queue, call)
	q.mu.Unlock()
	select {
	case <-call.done:
		return call.cmd
	case <-ctx.Done():
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
}

// landed ends a flight: its slot takes the queue, if any, as the next.
func (q *coalescer) landed() {
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
func (q *coalescer) fly(batch []*queuedCall) {
	defer q.landed()
	calls := make([]scriptCall, len(batch))
	for i, queued := range batch {
		calls[i] = queued.scriptCall
	}
	// The context is shared by callers: none of theirs may cut it short.
	sendScripts(context.Background(), q.fns, q.rdb, calls)
	for i, queued := range batch {
		queued.cmd = calls[i].cmd
		close(queued.done)
	}
}
