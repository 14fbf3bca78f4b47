package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/check"
	"github.com/dlockio/dlock/internal/family"
)

// lockTypes are the lock types the demo and bench run, in table order.
var lockTypes = family.Types()

// contention is one run of workers taking one lock back to back, each with
// its own Redis connection, as separate processes would.
type contention struct {
	lockType string
	newRedis func() redis.UniversalClient
	prefix   string // of every key: a sandbox's
	name     string
	workers  int
	duration time.Duration
	hold     time.Duration // the work done under the lock
	acquired atomic.Int64  // so far, for a progress line
}

// contentionResult is what the checkers saw.
type contentionResult struct {
	acquisitions int
	overlaps     int              // holders inside together (readers, or permits up to their number, are fine)
	stale        int              // entries whose token was not above all before (a Semaphore's: repeated)
	handoffs     *check.Latencies // nil where not measured (Semaphore, MultiLock)
	readHandoffs *check.Latencies // RWMutex only
	perWorker    []int            // acquisitions of each worker
	elapsed      time.Duration
}

// spread is the most acquisitions of a worker over the fewest: 1 is fair.
func (r contentionResult) spread() float64 {
	if len(r.perWorker) == 0 {
		return 0
	}
	least, most := r.perWorker[0], r.perWorker[0]
	for _, n := range r.perWorker {
		least, most = min(least, n), max(most, n)
	}
	if least == 0 {
		return math.Inf(1)
	}
	return float64(most) / float64(least)
}

// checkers watch one run: each lock type reports to the one that fits it.
type checkers struct {
	fenced  check.Fenced
	shared  check.Shared
	bounded check.Bounded
	perName map[string]*check.Fenced // a MultiLock's locks
}

// multiNames are the locks a MultiLock run shares out: each worker takes two
// of three, in either order.
func multiNames(name string) []string { return []string{name + ":a", name + ":b", name + ":c"} }

// semaphorePermits is how many holders a Semaphore run lets in at once.
func semaphorePermits(workers int) int { return max(2, workers/4) }

func (r contentionResult) ok() bool {
	return r.acquisitions > 0 && r.overlaps == 0 && r.stale == 0
}

// worker is one contender's loop body: acquire, work, release. An error
// stops the contender.
type worker func(ctx context.Context) error

// firstAcquisitionBound is how long past its duration a run goes on while no
// worker has acquired yet: a verdict needs at least one acquisition, and a
// loaded machine may take longer than the duration to make the first.
const firstAcquisitionBound = 30 * time.Second

func (c *contention) run(parent context.Context) (contentionResult, error) {
	bounded, stop := context.WithTimeout(parent, c.duration+firstAcquisitionBound)
	defer stop()
	ctx, cancel := context.WithCancel(bounded)
	defer cancel()
	first := make(chan struct{})
	var firstOnce sync.Once
	go func() { // the run ends at its duration, or at the first acquisition after it
		timer := time.NewTimer(c.duration)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return
		}
		select {
		case <-first:
		case <-ctx.Done():
		}
		cancel()
	}()
	ch := &checkers{bounded: check.Bounded{Limit: semaphorePermits(c.workers)}, perName: make(map[string]*check.Fenced)}
	for _, name := range multiNames(c.name) {
		ch.perName[name] = new(check.Fenced)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, c.workers)
	perWorker := make([]int, c.workers)
	for i := range c.workers {
		rdb := c.newRedis()
		client, err := dlock.New(rdb, dlock.WithPrefix(c.prefix))
		if err != nil { // a bad prefix: the workers started stop with the run
			_ = rdb.Close()
			errs <- err
			cancel()
			break
		}
		work := c.worker(client, i, ch)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer rdb.Close()
			defer client.Close()
			for ctx.Err() == nil {
				if err := work(ctx); err != nil {
					if ctx.Err() == nil || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
						errs <- err
					}
					return
				}
				firstOnce.Do(func() { close(first) })
				perWorker[i]++
				c.acquired.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return contentionResult{}, err
	}
	if err := parent.Err(); err != nil { // interrupted: no verdict
		return contentionResult{}, err
	}
	res := contentionResult{elapsed: time.Since(start), perWorker: perWorker}
	switch k := kindOfType(c.lockType); {
	case k.Mode == family.Shared:
		r := ch.shared.Result()
		res.acquisitions, res.overlaps, res.stale = r.Reads+r.Writes, r.Conflicts, r.Stale
		res.handoffs, res.readHandoffs = &ch.shared.WriteHandoffs, &ch.shared.ReadHandoffs
	case k.Mode == family.Permit:
		r := ch.bounded.Result()
		res.acquisitions, res.overlaps, res.stale = r.Completed, r.Over, r.Repeated
	case k.Group:
		for _, n := range perWorker {
			res.acquisitions += n
		}
		for _, f := range ch.perName {
			r := f.Result()
			res.overlaps, res.stale = res.overlaps+r.Overlaps, res.stale+r.Stale
		}
	default:
		r := ch.fenced.Result()
		res.acquisitions, res.overlaps, res.stale, res.handoffs = r.Completed, r.Overlaps, r.Stale, &ch.fenced.Handoffs
	}
	return res, nil
}

// worker makes worker i's loop body for the lock type. Errors after the
// run's context ended are the run ending, not failures.
func (c *contention) worker(client *dlock.Client, i int, ch *checkers) worker {
	fenced, shared := &ch.fenced, &ch.shared
	unlock := func(ctx context.Context, l *dlock.Lease) error {
		if err := l.Unlock(ctx); err != nil && ctx.Err() == nil {
			return err
		}
		return nil
	}
	k := kindOfType(c.lockType)
	take := func(k family.Kind, names ...string) func(context.Context) (*dlock.Lease, error) {
		taker := k.Handle(family.Target{Client: client, Permits: ch.bounded.Limit}, names)
		return func(ctx context.Context) (*dlock.Lease, error) { return taker(ctx, false) }
	}
	switch {
	case c.lockType == "ReentrantMutex":
		m := client.ReentrantMutex(c.name)
		return func(ctx context.Context) error {
			asked := time.Now()
			outer, err := m.Lock(ctx)
			if err != nil {
				return err
			}
			fenced.Enter(i, outer.Token(), asked)
			inner, err := m.Lock(outer.Context(ctx)) // re-entry through the hold's context: same token, no wait
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
	case k.Mode == family.Shared:
		if i%4 == 0 { // a writer for every three readers
			lock := take(family.MustOf(k.Takeover), c.name)
			return func(ctx context.Context) error {
				asked := time.Now()
				l, err := lock(ctx)
				if err != nil {
					return err
				}
				shared.EnterWrite(l.Token(), asked)
				time.Sleep(c.hold)
				shared.ExitWrite()
				return unlock(ctx, l)
			}
		}
		rlock := take(k, c.name)
		return func(ctx context.Context) error {
			asked := time.Now()
			l, err := rlock(ctx)
			if err != nil {
				return err
			}
			shared.EnterRead(asked)
			time.Sleep(c.hold)
			shared.ExitRead()
			return unlock(ctx, l)
		}
	case k.Mode == family.Permit:
		acquire := take(k, c.name)
		return func(ctx context.Context) error {
			l, err := acquire(ctx)
			if err != nil {
				return err
			}
			ch.bounded.Enter(l.Token())
			time.Sleep(c.hold)
			ch.bounded.Exit()
			return unlock(ctx, l)
		}
	case k.Group:
		all := multiNames(c.name)
		names := []string{all[i%3], all[(i+1)%3]}
		if i%2 == 1 {
			names[0], names[1] = names[1], names[0] // the order asked in does not matter
		}
		lock := take(k, names...)
		return func(ctx context.Context) error {
			asked := time.Now()
			l, err := lock(ctx)
			if err != nil {
				return err
			}
			tokens := l.Tokens()
			for name, token := range tokens {
				ch.perName[name].Enter(i, token, asked)
			}
			time.Sleep(c.hold)
			for name := range tokens {
				ch.perName[name].Exit(i)
			}
			return unlock(ctx, l)
		}
	case c.lockType == "Election": // a leadership is the critical section, its term the token
		e := client.Election(c.name)
		campaign := func(ctx context.Context) (*dlock.Lease, error) { return e.Campaign(ctx, fmt.Sprint("worker-", i)) }
		resign := func(ctx context.Context, _ *dlock.Lease) error {
			if err := e.Resign(context.WithoutCancel(ctx)); err != nil && ctx.Err() == nil {
				return err
			}
			return nil
		}
		return c.exclusive(campaign, i, fenced, resign)
	default: // one holder at a time: a Mutex, a FairMutex
		return c.exclusive(take(k, c.name), i, fenced, unlock)
	}
}

// kindOfType is the first of the family's kinds of lockType: an RWMutex's
// read side.
func kindOfType(lockType string) family.Kind {
	return family.All[slices.IndexFunc(family.All, func(k family.Kind) bool { return k.Type == lockType })]
}

// exclusive is the loop body of worker i on a lock with one holder at a time.
func (c *contention) exclusive(lock func(context.Context) (*dlock.Lease, error), i int, fenced *check.Fenced,
	unlock func(context.Context, *dlock.Lease) error) worker {
	return func(ctx context.Context) error {
		asked := time.Now()
		l, err := lock(ctx)
		if err != nil {
			return err
		}
		fenced.Enter(i, l.Token(), asked)
		time.Sleep(c.hold)
		fenced.Exit(i)
		return unlock(ctx, l)
	}
}
