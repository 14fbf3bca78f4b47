package dlock

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// renewer keeps every auto-renewed lease of a Client alive with one goroutine,
// however many leases there are: a heap ordered by when each is due. The
// leases due together are sent as one pipeline per node (on a cluster, the
// master serving the lease's slot), each on a goroutine of its own that ends
// with its reply or its deadline: a stalled node holds up the renewals of
// its own leases only, and the loop goes on renewing the other nodes' on
// time. Each lease is renewed every TTL/3, so two renewals in a row may fail
// before its deadline passes. The loop runs only while there are leases to
// renew or renewals in flight.
type renewer struct {
	c *Client

	mu      sync.Mutex
	due     leaseHeap
	running bool
	starts  int // how many times the loop was started (for tests)
	closed  bool
	kick    chan struct{} // a lease became due earlier than the loop sleeps
	// wakeAt is when the sleeping loop wakes by itself; zero while it is
	// awake, as it looks at the heap again before it sleeps. A lease due
	// no earlier needs no kick: a Lock then costs no goroutine wake-up.
	wakeAt time.Time
	// idleSince is when the loop last found nothing to renew; it ends once
	// that has lasted renewerLinger (zero: it has something).
	idleSince time.Time
	inFlight  int // batches sent and not yet answered
	wg        sync.WaitGroup

	ctx    context.Context // cancelled by close: stops the loop and its I/O
	cancel context.CancelFunc
}

// renewerLinger is how long the loop outlives its last lease. Without it, a
// Lock and Unlock in a row started a goroutine and a timer each time: the
// loop would run only once the caller blocked on the release, find nothing
// to renew, and end.
const renewerLinger = 2 * time.Second

// renewSlack lets a lease due a little later join a batch being sent now:
// fewer round trips for a slightly earlier renewal.
func renewSlack(ttl time.Duration) time.Duration { return min(ttl/12, 50*time.Millisecond) }

func newRenewer(c *Client) *renewer {
	ctx, cancel := context.WithCancel(context.Background())
	return &renewer{c: c, kick: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
}

// add schedules l's first renewal at at, starting the loop on first use.
func (r *renewer) add(l *Lease, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return // the lease runs to its deadline, then reports itself lost
	}
	r.schedule(l, at)
}

// schedule sets l's next renewal to at, whether it was scheduled or not,
// and wakes or starts the loop if it would not renew it in time; r.mu must
// be held.
func (r *renewer) schedule(l *Lease, at time.Time) {
	l.nextRenew = at
	if l.heapIndex >= 0 {
		heap.Fix(&r.due, l.heapIndex)
	} else {
		heap.Push(&r.due, l)
	}
	if !r.running {
		r.running = true
		r.starts++
		r.wg.Add(1)
		go r.loop()
	}
	if !r.wakeAt.IsZero() && at.Before(r.wakeAt) {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// remove stops renewing l; harmless when it is not scheduled.
func (r *renewer) remove(l *Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l.heapIndex >= 0 {
		heap.Remove(&r.due, l.heapIndex)
	}
}

func (r *renewer) close(deadline time.Time) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	// A batch stuck on a stalled server does not see the cancel when its
	// go-redis client has no read timeout (nor ContextTimeoutEnabled): it
	// ends when the server answers. Close waits for it until deadline.
	stopped := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(stopped)
	}()
	waitUntil(stopped, deadline)
}

// waitUntil returns when done is closed or deadline has passed.
func waitUntil(done <-chan struct{}, deadline time.Time) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
}

// isRunning reports whether the loop goroutine is alive (for tests).
func (r *renewer) isRunning() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running
}

// scheduled reports how many leases wait for renewal (for tests).
func (r *renewer) scheduled() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.due)
}

func (r *renewer) loop() {
	defer r.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		batch, sleep, idle := r.takeDue(time.Now())
		if idle {
			return
		}
		if len(batch) > 0 {
			r.sendByNode(batch)
			continue
		}
		timer.Reset(sleep)
		select {
		case <-timer.C:
		case <-r.kick:
		case <-r.ctx.Done():
			r.mu.Lock()
			r.running = false
			r.mu.Unlock()
			return
		}
	}
}

// takeDue pops the leases due by now (with slack), or says how long to sleep,
// or that nothing has been left to renew for renewerLinger: then the loop
// ends, marked not running under the same lock that add starts a new one
// under.
func (r *renewer) takeDue(now time.Time) (batch []*Lease, sleep time.Duration, idle bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wakeAt = time.Time{}
	if len(r.due) == 0 {
		if r.inFlight > 0 { // their leases come back when answered
			r.idleSince = time.Time{}
			r.wakeAt = now.Add(renewerLinger)
			return nil, renewerLinger, false
		}
		if r.idleSince.IsZero() {
			r.idleSince = now
		}
		if left := r.idleSince.Add(renewerLinger).Sub(now); left > 0 {
			r.wakeAt = now.Add(left)
			return nil, left, false
		}
		r.running = false
		r.idleSince = time.Time{}
		return nil, 0, true
	}
	r.idleSince = time.Time{}
	for len(r.due) > 0 {
		next := r.due[0]
		if next.nextRenew.After(now.Add(renewSlack(next.currentTTL()))) {
			if len(batch) == 0 {
				r.wakeAt = next.nextRenew
				return nil, next.nextRenew.Sub(now), false
			}
			break
		}
		heap.Pop(&r.due)
		batch = append(batch, next)
	}
	return batch, 0, false
}

// sendByNode sends the due leases' renewals as one batch per node, each on
// its own goroutine with its own deadline: go-redis's cluster and Ring
// pipelines wait for every node they write to, and a cluster's sets the
// context's error on every command in it, so one batch for all nodes made a
// stalled node cost the leases of the healthy ones. A lease whose node is
// not known is sent with the others whose node is not known: the client
// routes them.
func (r *renewer) sendByNode(due []*Lease) {
	var nodeOf func(key string) (*redis.Client, error)
	switch rdb := r.c.rdb.(type) {
	case *redis.ClusterClient:
		nodeOf = func(key string) (*redis.Client, error) { return rdb.MasterForKey(r.ctx, key) }
	case *redis.Ring:
		nodeOf = rdb.GetShardClientForKey
	default:
		r.sendBatch(due) // one node: a server, or Sentinel's master
		return
	}
	byNode := make(map[*redis.Client][]*Lease)
	for _, l := range due {
		var node *redis.Client
		if len(l.keys) > 0 {
			if n, err := nodeOf(l.keys[0]); err == nil {
				node = n
			}
		}
		byNode[node] = append(byNode[node], l)
	}
	for _, batch := range byNode {
		r.sendBatch(batch)
	}
}

// sendBatch renews one node's batch on a goroutine of its own, which ends
// with the batch's answer or deadline.
func (r *renewer) sendBatch(batch []*Lease) {
	r.mu.Lock()
	r.inFlight++
	r.mu.Unlock()
	r.wg.Add(1) // the loop's own count keeps close's Wait from returning first
	go func() {
		defer r.wg.Done()
		r.renew(r.ctx, batch)
		r.mu.Lock()
		r.inFlight--
		r.mu.Unlock()
	}()
}

// extendBusyRetry is how soon a renewal skipped for an Extend in flight is
// tried again.
const extendBusyRetry = 5 * time.Millisecond

// renew sends one batch and applies each answer. A lease whose Extend is in
// flight is put back for a moment: one extension of a lease at a time.
func (r *renewer) renew(ctx context.Context, due []*Lease) {
	batch := due[:0]
	for _, l := range due {
		switch {
		case !l.extendMu.TryLock():
			r.reschedule(l, time.Now().Add(extendBusyRetry))
		case l.pastDeadline():
			// Renewing would not bring it back: a timer that has not fired
			// (the machine was suspended) finds it lost here.
			l.extendMu.Unlock()
			l.expireIfPast()
		default:
			batch = append(batch, l)
		}
	}
	defer func() {
		for _, l := range batch {
			l.extendMu.Unlock()
		}
	}()
	if len(batch) == 0 {
		return
	}
	ttls := make([]time.Duration, len(batch))
	timeout := time.Duration(0)
	for i, l := range batch {
		ttls[i] = l.currentTTL()
		// Waiting past the earliest deadline in the batch would help no one.
		if left := time.Until(l.Deadline()); i == 0 || left < timeout {
			timeout = left
		}
	}
	ctx, cancel := context.WithTimeout(ctx, max(timeout, MinTTL/4))
	defer cancel()

	sent := time.Now()
	results := r.send(ctx, batch, ttls)

	now := time.Now()
	for i, l := range batch {
		switch err := results[i]; {
		case err == nil:
			if l.renewed(sent, ttls[i]) == nil {
				r.reschedule(l, sent.Add(ttls[i]/3))
			}
		case errors.Is(err, ErrLeaseLost): // refused: see send
			l.renewalFailed(err, true)
			l.refusedWith(err)
		case isWrongType(err):
			l.renewalFailed(err, true)
			l.refused()
		default:
			l.renewalFailed(err, false)
			// Try again soon, well before the deadline; if none gets through,
			// the deadline timer reports the loss.
			l.log.Debug("dlock: renewal failed, retrying", "lock", l.name, "err", err)
			r.reschedule(l, now.Add(max(time.Until(l.Deadline())/4, 5*time.Millisecond)))
		}
	}
}

// send pipelines one extend per lease.
func (r *renewer) send(ctx context.Context, batch []*Lease, ttls []time.Duration) []error {
	calls := make([]scriptCall, len(batch))
	for i, l := range batch {
		calls[i] = scriptCall{script: l.kind.extend, argv: evalshaArgv(l.kind.extend, l.keys, []any{l.owner, ttls[i].Milliseconds()})}
	}
	sendScripts(ctx, r.c.rdb, calls)
	errs := make([]error, len(batch))
	for i, call := range calls {
		n, err := call.cmd.Int64()
		switch {
		case err != nil:
			errs[i] = err
		case n != 1:
			errs[i] = refusal(n)
		}
	}
	return errs
}

// reschedule sets l's next renewal to at, unless it ended or was unlocked
// meanwhile.
func (r *renewer) reschedule(l *Lease, at time.Time) {
	if l.ended() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || l.unlocking.Load() {
		return
	}
	r.schedule(l, at)
}

// leaseHeap orders leases by next renewal; it implements heap.Interface.
type leaseHeap []*Lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].nextRenew.Before(h[j].nextRenew) }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex, h[j].heapIndex = i, j
}
func (h *leaseHeap) Push(x any) {
	l := x.(*Lease)
	l.heapIndex = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	l.heapIndex = -1
	*h = old[:len(old)-1]
	return l
}
