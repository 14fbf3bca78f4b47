package dlock

import (
	"context"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// dialWatch is a go-redis hook that counts a client's dials and keeps why
// the last failed (nil once one succeeded): a call with a short deadline
// sees only the deadline, not the refused connection behind it.
type dialWatch struct {
	opened atomic.Int64
	failed atomic.Pointer[dialFailure]
}

type dialFailure struct {
	err error
	at  time.Time
}

// watchDials is rdb's dialWatch, one per go-redis client (a hook cannot be
// removed). A Cluster client's goes on each node client made from now on.
func watchDials(rdb redis.UniversalClient) *dialWatch {
	switch r := rdb.(type) {
	case *redis.Client:
		return sharedWatch(r, rdb)
	case *redis.ClusterClient:
		return sharedWatch(r, rdb)
	case *redis.Ring:
		return sharedWatch(r, rdb)
	}
	return addWatch(rdb, &dialWatch{}) // a client of another kind: one per Client
}

// dialWatches maps a go-redis client, held weakly, to its dialWatch.
var dialWatches sync.Map

func sharedWatch[T any](client *T, rdb redis.UniversalClient) *dialWatch {
	key := weak.Make(client)
	if w, ok := dialWatches.Load(key); ok {
		return w.(*dialWatch)
	}
	w, loaded := dialWatches.LoadOrStore(key, &dialWatch{})
	if !loaded {
		addWatch(rdb, w.(*dialWatch))
		runtime.AddCleanup(client, func(key weak.Pointer[T]) { dialWatches.Delete(key) }, key)
	}
	return w.(*dialWatch)
}

func addWatch(rdb redis.UniversalClient, w *dialWatch) *dialWatch {
	rdb.AddHook(w)
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		cluster.OnNewNode(func(node *redis.Client) { node.AddHook(w) })
	}
	return w
}

// failure is why the last dial failed, if it did after since.
func (w *dialWatch) failure(since time.Time) error {
	if f := w.failed.Load(); f != nil && f.at.After(since) {
		return f.err
	}
	return nil
}

func (w *dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		switch {
		case err == nil:
			w.opened.Add(1)
			w.failed.Store(nil)
		case ctx.Err() == nil: // a dial the call's end cut short says nothing of the server
			w.failed.Store(&dialFailure{err, time.Now()})
		}
		return conn, err
	}
}

func (w *dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (w *dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
