package dlock

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// coalescer sends the scripts that concurrent callers of one Client run
// (acquires and releases) in shared pipelines: while coalesceFlights
// round trips are in flight, callers queue, and the next flight carries all
// of them, one write and one read for the lot. When nothing is in flight a
// call goes straight out, so an uncontended caller pays nothing for it.
//
// Most of a Client's cost on a busy machine is system calls, one write and
// one read per command; sharing them is how many goroutines of one process
// get more lock operations through than one round trip each would allow.
type coalescer struct {
	rdb redis.UniversalClient

	mu      sync.Mutex
	queue   []*scriptCall
	flights int
}

const (
	coalesceFlights = 2   // round trips in flight at once
	coalesceBatch   = 256 // scripts in one pipeline at most
)

type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	done   chan struct{}
}

// run runs script like [redis.Script.Run]. A caller whose ctx ends while
// its call waits to be sent gets ctx's error; the call may still go out,
// which callers treat as any reply lost on the way (its outcome unknown).
func (q *coalescer) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	q.mu.Lock()
	if q.flights < coalesceFlights && len(q.queue) == 0 {
		q.flights++
		q.mu.Unlock()
		cmd := script.Run(ctx, q.rdb, keys, args...)
		q.landed()
		return cmd
	}
	call := &scriptCall{script: script, keys: keys, args: args, done: make(chan struct{})}
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
	q.queue = append([]*scriptCall(nil), q.queue[n:]...)
	q.mu.Unlock()
	go q.fly(batch)
}

// fly sends one batch as a pipeline, its scripts by SHA, and again with
// their bodies those the server did not know (after SCRIPT FLUSH or a
// restart).
func (q *coalescer) fly(batch []*scriptCall) {
	defer q.landed()
	ctx := context.Background() // shared by callers: none of theirs may cut it short
	q.send(ctx, batch, false)
	var unknown []*scriptCall
	for _, call := range batch {
		if isNoScript(call.cmd.Err()) {
			unknown = append(unknown, call)
		}
	}
	if len(unknown) > 0 {
		q.send(ctx, unknown, true)
	}
	for _, call := range batch {
		close(call.done)
	}
}

func (q *coalescer) send(ctx context.Context, batch []*scriptCall, withBody bool) {
	pipe := q.rdb.Pipeline()
	for _, call := range batch {
		if withBody {
			call.cmd = call.script.Eval(ctx, pipe, call.keys, call.args...)
		} else {
			call.cmd = call.script.EvalSha(ctx, pipe, call.keys, call.args...)
		}
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
}
