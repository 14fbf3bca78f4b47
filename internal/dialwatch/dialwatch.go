// Package dialwatch counts a go-redis client's dials and keeps why the
// last one failed: a call with a short deadline sees only the deadline,
// not the refused connection behind it.
package dialwatch

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

// Watch is the go-redis hook; a dial that succeeds clears its last failure.
type Watch struct {
	Opened atomic.Int64 // dials that succeeded
	failed atomic.Pointer[dialFailure]
}

type dialFailure struct {
	err error
	at  time.Time
}

// Of is rdb's Watch, one per go-redis client (a hook cannot be removed).
// A Cluster client's goes on each node client made from now on.
func Of(rdb redis.UniversalClient) *Watch {
	switch r := rdb.(type) {
	case *redis.Client:
		return sharedWatch(r, rdb)
	case *redis.ClusterClient:
		return sharedWatch(r, rdb)
	case *redis.Ring:
		return sharedWatch(r, rdb)
	}
	return addWatch(rdb, &Watch{}) // a client of another kind: a new Watch each time
}

// watches maps a go-redis client, held weakly, to its Watch.
var watches sync.Map

func sharedWatch[T any](client *T, rdb redis.UniversalClient) *Watch {
	key := weak.Make(client)
	w, loaded := watches.LoadOrStore(key, &Watch{})
	if !loaded {
		addWatch(rdb, w.(*Watch))
		runtime.AddCleanup(client, func(key weak.Pointer[T]) { watches.Delete(key) }, key)
	}
	return w.(*Watch)
}

func addWatch(rdb redis.UniversalClient, w *Watch) *Watch {
	rdb.AddHook(w)
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		cluster.OnNewNode(func(node *redis.Client) { node.AddHook(w) })
	}
	return w
}

// Failure is why the last dial failed, if it did after since.
func (w *Watch) Failure(since time.Time) error {
	if f := w.failed.Load(); f != nil && f.at.After(since) {
		return f.err
	}
	return nil
}

func (w *Watch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		switch {
		case err == nil:
			w.Opened.Add(1)
			w.failed.Store(nil)
		case ctx.Err() == nil: // a dial the call's end cut short says nothing of the server
			w.failed.Store(&dialFailure{err, time.Now()})
		}
		return conn, err
	}
}

func (w *Watch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (w *Watch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
