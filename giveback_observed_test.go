package dlock_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// A Lock that gives back a grant it could not confirm held the lock for a
// while, under no lease anyone was returned: an observer (a trace, or the
// explorer's history) is told, as a retry with what the grant met, however
// the call goes on; so is a first attempt in doubt, cleaned up after. Before,
// a give-back in the call's first attempt, one whose confirmation found
// Redis unavailable, and a first attempt whose reply was lost went on
// unreported.
func TestLock_GivenBackGrantIsReportedAsARetry(t *testing.T) {
	const ttl = 300 * time.Millisecond
	cases := []struct {
		name    string
		replies []error         // what the scripts' replies become, in turn: nil keeps the reply
		delays  []time.Duration // and how late each comes back
		want    func(error) bool
	}{
		{"grant after its TTL", nil, []time.Duration{ttl * 3 / 2},
			func(err error) bool { return errors.Is(err, dlock.ErrNotAcquired) }},
		{"confirmation met a dropped connection", []error{nil, io.EOF}, []time.Duration{ttl * 8 / 10},
			func(err error) bool { return errors.Is(err, dlock.ErrUnavailable) }},
		{"grant's reply lost with its connection", []error{io.EOF}, nil,
			func(err error) bool { return errors.Is(err, dlock.ErrUnavailable) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rdb := backends[0].newRedis(t)
			var mu sync.Mutex
			replies, delays := tc.replies, tc.delays
			rdb.AddHook(replyHook(func(cmd redis.Cmder, reply error) error {
				if !isScriptCall(cmd) || missingScript(reply) {
					return reply // the scripts' loading, on a server that has not seen them
				}
				mu.Lock()
				var d time.Duration
				var err error
				if len(delays) > 0 {
					d, delays = delays[0], delays[1:]
				}
				if len(replies) > 0 {
					err, replies = replies[0], replies[1:]
				}
				mu.Unlock()
				time.Sleep(d) // the workload: a slow reply
				if err != nil {
					return err // applied, its reply lost with the connection
				}
				return reply
			}))
			observed, retried := observeRetries()
			ctx := ctxFor(t, 30*time.Second)
			lease, err := newClient(t, rdb, dlock.WithTTL(ttl), observed).Mutex(lockName(t)).Lock(ctx)
			if err != nil {
				t.Fatalf("Lock whose first grant was given back: %v; want it to try again", err)
			}
			defer lease.Unlock(ctx)
			if retries := retried(); len(retries) == 0 || !tc.want(retries[0]) {
				t.Fatalf("retries reported: %v; want the given-back grant's first", retries)
			}
		})
	}
}

// replyHook turns each command's reply error, once it came back, into the
// one it returns (a go-redis Client sets a command's error to its hooks').
type replyHook func(cmd redis.Cmder, reply error) error

func (h replyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h replyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h(cmd, next(ctx, cmd))
	}
}

func (h replyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			cmd.SetErr(h(cmd, cmd.Err())) // a pipeline's commands keep their own
		}
		return err
	}
}
