package dlock

import (
	"container/heap"
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/internal/scripts"
)

// renewer keeps every auto-renewed lease of a Client alive with one
// goroutine over a heap ordered by due time, running only while it has
// work. Leases due together go as one pipeline per node (see sendByNode).
type renewer struct {
	c *Client

	mu        sync.Mutex
	due       leaseHeap
	running   bool
	kick      chan struct{} // a lease became due before wakeAt
	wakeAt    time.Time     // when the sleeping loop wakes by itself (zero: awake)
	idleSince time.Time     // when the loop last found nothing to renew (zero: busy)
	inFlight  atomic.Int32  // batches sent and not yet answered
	wg        sync.WaitGroup

	ctx    context.Context // cancelled by close, under mu: stops the loop and its I/O
	cancel context.CancelFunc
}

// renewerLinger is how long an idle loop lives on: no goroutine per Lock.
const renewerLinger = 2 * time.Second

// renewSlack lets a lease due a little later join a batch sent now.
func renewSlack(l *Lease) time.Duration { return min(l.currentTTL()/12, 50*time.Millisecond) }

func newRenewer(c *Client) *renewer {
	ctx, cancel := context.WithCancel(context.Background())
	return &renewer{c: c, kick: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
}

// schedule sets h's next renewal to at, unless its lease is ending or the
// renewer was closed, and wakes or starts the loop if it would be late.
func (r *renewer) schedule(h *clientHold, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil || h.lease.releasing() { // closed; released, or ended
		return
	}
	h.nextRenew = at
	if h.heapIndex >= 0 {
		heap.Fix(&r.due, h.heapIndex)
	} else {
		heap.Push(&r.due, h)
	}
	if !r.running {
		r.running = true
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

// remove stops renewing h; harmless when it is not scheduled.
func (r *renewer) remove(h *clientHold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h.heapIndex >= 0 {
		heap.Remove(&r.due, h.heapIndex)
	}
}

// close stops the renewals for good; Client.Close calls it once.
func (r *renewer) close(deadline time.Time) {
	r.mu.Lock()
	r.cancel() // under mu: no schedule starts a loop after it
	r.mu.Unlock()
	stopped := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(stopped)
	}()
	waitUntil(stopped, deadline) // a batch on a stalled server (no read timeout) may miss the cancel
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

func (r *renewer) loop() {
	defer r.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.c.clock.Wait() // a suspended process renews nothing until it resumes (see Lease.checkDeadline)
		batch, sleep, idle := r.takeDue(r.c.clock.Now())
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

// takeDue pops the leases due by now (with slack), or says how long to
// sleep, or that the loop ends (marked under r.mu, as schedule reads it).
func (r *renewer) takeDue(now time.Time) (batch []*clientHold, sleep time.Duration, idle bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	idleSince := r.idleSince
	if idleSince.IsZero() {
		idleSince = now
	}
	r.idleSince, r.wakeAt = time.Time{}, time.Time{}
	switch {
	case len(r.due) > 0:
		for len(r.due) > 0 && !r.due[0].nextRenew.After(now.Add(renewSlack(r.due[0].lease))) {
			batch = append(batch, heap.Pop(&r.due).(*clientHold))
		}
		if len(batch) > 0 {
			return batch, 0, false
		}
		r.wakeAt = r.due[0].nextRenew
	case r.inFlight.Load() > 0: // their leases come back when answered
		r.wakeAt = now.Add(renewerLinger)
	case now.Before(idleSince.Add(renewerLinger)):
		r.idleSince, r.wakeAt = idleSince, idleSince.Add(renewerLinger)
	default:
		r.running = false
		return nil, 0, true
	}
	return nil, r.wakeAt.Sub(now), false
}

// sendByNode sends the due leases' renewals as one batch per master and
// replica rule, each on a goroutine of its own: a cluster pipeline waits
// for every node it writes to, so a stalled node would cost the others.
func (r *renewer) sendByNode(due []*clientHold) {
	type batchKey struct {
		node redis.UniversalClient
		ack  replicaAck
	}
	byNode := make(map[batchKey][]*clientHold)
	for _, h := range due {
		node, err := fcall.MasterFor(r.ctx, r.c.rdb, h.keys[0])
		if err != nil {
			node = nil // not known: sent with the others not known, which the client routes
		}
		key := batchKey{node, h.ack}
		byNode[key] = append(byNode[key], h)
	}
	r.inFlight.Add(int32(len(byNode)))
	r.wg.Add(len(byNode)) // the loop's own count keeps close's Wait from returning first
	for _, batch := range byNode {
		go func() {
			defer r.wg.Done()
			r.renew(r.ctx, batch)
			r.inFlight.Add(-1)
		}()
	}
}

// renew sends one node's batch, less leases lockForRenewal refuses.
func (r *renewer) renew(ctx context.Context, due []*clientHold) {
	batch := due[:0]
	for _, h := range due {
		if h.lease.lockForRenewal() {
			batch = append(batch, h)
		}
	}
	if len(batch) == 0 {
		return
	}
	ttls := make([]time.Duration, len(batch))
	calls := make([]fcall.Call, len(batch)) // one extend per lease, in one pipeline
	timeout := time.Duration(math.MaxInt64) // waiting past the earliest deadline would help no one
	for i, h := range batch {
		ttls[i] = h.lease.currentTTL()
		calls[i] = fcall.Call{Script: h.kind.extend, Argv: fcall.Argv(h.kind.extend, h.keys, scripts.ExtendArgs{Owner: h.owner, TTL: ttls[i].Milliseconds(), Shorten: lengthens, Info: h.infoArg()})}
		timeout = min(timeout, r.c.clock.Until(h.lease.Deadline()))
	}
	ctx, cancel := context.WithTimeout(ctx, max(timeout, MinTTL/4))
	defer cancel()
	sent := r.c.clock.Now()
	acks := r.c.sendAcknowledged(ctx, batch[0].ack, calls) // one node, one rule (see sendByNode)
	var reports []renewalReport
	for i, call := range calls {
		n, err := call.Cmd.Int64()
		switch {
		case err == nil && n != 1:
			err = refusal(n)
		case err == nil && acks != nil:
			err = acks[i] // applied, but not where a failover would keep it: not counted on
		}
		if report := batch[i].lease.renewalAnswered(sent, ttls[i], renewalLoss(err), err); report.hook != nil {
			reports = append(reports, report)
		}
		batch[i].lease.extendMu.Unlock()
	}
	for _, report := range reports { // told last: a slow hook delays no lease
		report.tell()
	}
}

// renewalLoss is a renewal error's loss: refused, or a foreign key; else nil.
func renewalLoss(err error) error {
	switch {
	case errors.Is(err, ErrLeaseLost):
		return err
	case isWrongType(err):
		return errRenewalRefused
	}
	return nil
}

// leaseHeap orders holds by next renewal; it implements heap.Interface.
type leaseHeap []*clientHold

func (q leaseHeap) Len() int           { return len(q) }
func (q leaseHeap) Less(i, j int) bool { return q[i].nextRenew.Before(q[j].nextRenew) }
func (q leaseHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].heapIndex, q[j].heapIndex = i, j
}
func (q *leaseHeap) Push(x any) {
	h := x.(*clientHold)
	h.heapIndex = len(*q)
	*q = append(*q, h)
}
func (q *leaseHeap) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.heapIndex = -1
	*q = old[:len(old)-1]
	return h
}
