package dlock

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// dialWatch is a go-redis hook that hears a client's dials: how many
// connections it opened, and why its last dial failed (nil once one
// succeeded). go-redis dials again several times before a command fails,
// so a call with a short deadline sees only that deadline; this keeps the
// cause (a refused connection, say) for its error.
type dialWatch struct {
	opened atomic.Int64
	failed atomic.Pointer[dialFailure]
}

type dialFailure struct {
	err error
	at  time.Time
}

// watchDials adds a dialWatch to rdb. It costs nothing per command.
func watchDials(rdb redis.UniversalClient) *dialWatch {
	w := &dialWatch{}
	rdb.AddHook(w)
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
