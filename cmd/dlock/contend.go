package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/check"
)

// lockTypes are the lock types the demo and bench run, in table order.
var lockTypes = []string{"Mutex", "ReentrantMutex", "RWMutex"}

// contention is one run of workers taking one lock back to back, each with
// its own Redis connection, as separate processes would.
type contention struct {
	lockType string
	newRedis func() redis.UniversalClient
	name     string
	workers  int
	duration time.Duration
	hold     time.Duration // the work done under the lock
	acquired atomic.Int64  // so far, for a progress line
}

// contentionResult is what the checkers saw.
type contentionResult struct {
	acquisitions int
	overlaps     int // holders inside together (readers together are fine)
	stale        int // entries whose token was not above all before
	handoffs     *check.Latencies
	readHandoffs *check.Latencies // RWMutex only
	elapsed      time.Duration
}

func (r contentionResult) ok() bool {
	return r.acquisitions > 0 && r.overlaps == 0 && r.stale == 0
}

// worker is one contender's loop body: acquire, work, release. An error
// stops the contender.
type worker func(ctx context.Context) error

func (c *contention) run(ctx context.Context) (contentionResult, error) {
	ctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	var fenced check.Fenced
	var shared check.Shared
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, c.workers)
	for i := range c.workers {
		rdb := c.newRedis()
		client := dlock.New(rdb)
		work := c.worker(client, i, &fenced, &shared)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer rdb.Close()
			defer client.Close()
			for ctx.Err() == nil {
				if err := work(ctx); err != nil {
					if ctx.Err() == nil || !errors.Is(err, context.DeadlineExceeded) {
						errs <- err
					}
					return
				}
				c.acquired.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return contentionResult{}, err
	}
	res := contentionResult{elapsed: time.Since(start)}
	if c.lockType == "RWMutex" {
		r := shared.Result()
		res.acquisitions, res.overlaps, res.stale = r.Reads+r.Writes, r.Conflicts, r.Stale
		res.handoffs, res.readHandoffs = &shared.WriteHandoffs, &shared.ReadHandoffs
		return res, nil
	}
	r := fenced.Result()
	res.acquisitions, res.overlaps, res.stale, res.handoffs = r.Completed, r.Overlaps, r.Stale, &fenced.Handoffs
	return res, nil
}

// worker makes worker i's loop body for the lock type. Errors after the
// run's context ended are the run ending, not failures.
func (c *contention) worker(client *dlock.Client, i int, fenced *check.Fenced, shared *check.Shared) worker {
	unlock := func(ctx context.Context, l *dlock.Lease) error {
		if err := l.Unlock(ctx); err != nil && ctx.Err() == nil {
			return err
		}
		return nil
	}
	switch c.lockType {
	case "ReentrantMutex":
		m := client.ReentrantMutex(c.name)
		return func(ctx context.Context) error {
			asked := time.Now()
			outer, err := m.Lock(ctx)
			if err != nil {
				return err
			}
			fenced.Enter(i, outer.Token(), asked)
			inner, err := m.Lock(ctx) // re-entry: same token, no wait
			if err == nil && inner.Token() != outer.Token() {
				err = fmt.Errorf("re-entry got token %d, the hold has %d", inner.Token(), outer.Token())
			}
			time.Sleep(c.hold)
			fenced.Exit(i)
			if inner != nil {
				err = errors.Join(err, unlock(ctx, inner))
			}
			return errors.Join(err, unlock(ctx, outer))
		}
	case "RWMutex":
		rw := client.RWMutex(c.name)
		if i%4 == 0 { // a writer for every three readers
			return func(ctx context.Context) error {
				asked := time.Now()
				l, err := rw.Lock(ctx)
				if err != nil {
					return err
				}
				shared.EnterWrite(l.Token(), asked)
				time.Sleep(c.hold)
				shared.ExitWrite()
				return unlock(ctx, l)
			}
		}
		return func(ctx context.Context) error {
			asked := time.Now()
			l, err := rw.RLock(ctx)
			if err != nil {
				return err
			}
			shared.EnterRead(asked)
			time.Sleep(c.hold)
			shared.ExitRead()
			return unlock(ctx, l)
		}
	default:
		m := client.Mutex(c.name)
		return func(ctx context.Context) error {
			asked := time.Now()
			l, err := m.Lock(ctx)
			if err != nil {
				return err
			}
			fenced.Enter(i, l.Token(), asked)
			time.Sleep(c.hold)
			fenced.Exit(i)
			return unlock(ctx, l)
		}
	}
}
