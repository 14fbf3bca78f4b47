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
	argv   []any // the whole EVALSHA command
	cmd    *redis.Cmd
	done   chan struct{}
}

// evalshaArgv is the EVALSHA command of script on keys and args.
func evalshaArgv(script *redis.Script, keys []string, args []any) []any {
	argv := make([]any, 0, 3+len(keys)+len(args))
	argv = append(argv, "evalsha", script.Hash(), len(keys))
	for _, k := range keys {
		argv = append(argv, k)
	}
	return append(argv, args...)
}

// run runs script like [redis.Script.Run]. A caller whose ctx ends while
// its call waits to be sent gets ctx's error; the call may still go out,
// which callers treat as any reply lost on the way (its outcome unknown).
func (q *coalescer) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	return q.runArgv(ctx, script, evalshaArgv(script, keys, args))
}

// runArgv is run with the EVALSHA command already built, so that a hot
// path can keep what does not change (key names, TTLs) boxed once.
func (q *coalescer) runArgv(ctx context.Context, script *redis.Script, argv []any) *redis.Cmd {
	q.mu.Lock()
	if q.flights < coalesceFlights && len(q.queue) == 0 {
		q.flights++
		q.mu.Unlock()
		cmd := q.rdb.Do(ctx, argv...)
		if isNoScript(cmd.Err()) { // SCRIPT FLUSH or a restart: load it, send again
			if err := loadScript(ctx, q.rdb, script); err == nil {
				cmd = q.rdb.Do(ctx, argv...)
			}
		}
		q.landed()
		return cmd
	}
	call := &scriptCall{script: script, argv: argv, done: make(chan struct{})}
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

// fly sends one batch as a pipeline, and again those whose script the
// server did not know (after SCRIPT FLUSH or a restart), once loaded.
func (q *coalescer) fly(batch []*scriptCall) {
	defer q.landed()
	ctx := context.Background() // shared by callers: none of theirs may cut it short
	q.send(ctx, batch)
	var unknown []*scriptCall
	loaded := make(map[*redis.Script]bool)
	for _, call := range batch {
		if !isNoScript(call.cmd.Err()) {
			continue
		}
		if !loaded[call.script] {
			loaded[call.script] = loadScript(ctx, q.rdb, call.script) == nil
		}
		if loaded[call.script] {
			unknown = append(unknown, call)
		}
	}
	if len(unknown) > 0 {
		q.send(ctx, unknown)
	}
	for _, call := range batch {
		close(call.done)
	}
}

// loadScript makes script known wherever rdb may send it. A Ring sends
// SCRIPT LOAD, which names no key, to a random shard, so it is loaded on
// each; a ClusterClient loads on every master itself.
func loadScript(ctx context.Context, rdb redis.UniversalClient, script *redis.Script) error {
	if ring, ok := rdb.(*redis.Ring); ok {
		return ring.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error {
			return script.Load(ctx, shard).Err()
		})
	}
	return script.Load(ctx, rdb).Err()
}

func (q *coalescer) send(ctx context.Context, batch []*scriptCall) {
	pipe := q.rdb.Pipeline()
	for _, call := range batch {
		call.cmd = pipe.Do(ctx, call.argv...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
}
