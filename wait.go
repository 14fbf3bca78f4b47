package dlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/internal/notify"
	"github.com/dlockio/dlock/observe"
)

// handOver is a release's word to the waiter it handed the lock:
// "[ref:]fence:px" (hand_next.lua, fair_lib.lua).
type handOver struct {
	ref   string        // what precedes the token (a Mutex: the attempt it answers)
	token uint64        // the waiter's fencing token
	valid time.Duration // how long the hand-over holds the lock
}

// parseHandOver reads a release's word; ok is false for anything else.
func parseHandOver(grant string) (h handOver, ok bool) {
	px := strings.LastIndexByte(grant, ':')
	if px < 0 {
		return h, false
	}
	fence := strings.LastIndexByte(grant[:px], ':') // -1: no ref
	token, err1 := strconv.ParseUint(grant[fence+1:px], 10, 64)
	ms, err2 := strconv.ParseInt(grant[px+1:], 10, 64)
	if err1 != nil || err2 != nil || ms <= 0 {
		return h, false
	}
	return handOver{ref: grant[:max(fence, 0)], token: token, valid: time.Duration(ms) * time.Millisecond}, true
}

// waiterLeaseRefreshes is how many refreshes a registration lasts
// unrenewed (waiterLease): a waiter that misses one or two keeps its place.
const waiterLeaseRefreshes = 3

func waiterLease(refresh time.Duration) time.Duration { return waiterLeaseRefreshes * refresh }

// unread is the time left a Mutex's acquire tells a first registration
// behind other waiters. The call waits its own TTL instead: those ahead
// may be dead, and then nobody else retries as the hold runs out.
const unread = -3 * time.Millisecond

// acquireCall is a's TryLock (try: one attempt, never a wait) or Lock.
func acquireCall(ctx context.Context, a *call, try bool) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, acquireError(ctx, err)
	}
	wt := waiting{c: a.h.c, ctx: ctx, a: a, observed: a.h.cfg.observer.callIn(ctx), channel: a.spec.channels[0], answered: time.Now()}
	if !try {
		l, err := wt.run()
		return l, wt.ended(err)
	}
	l, left, err := wt.attempt()
	if err != nil {
		return nil, wt.ended(acquireError(ctx, err))
	}
	if l == nil {
		wt.leave(ctx) // if a copy of the attempt may be on its way, to take the lock once free
		return nil, notAcquired(a.h.name, left)
	}
	l.noteCopies(wt.maybeCopied)
	return keep(ctx, l)
}

// keep hands a granted lease to the caller, confirming a late grant first.
// If ctx ended or the confirmation failed, the grant is given back with the
// call's tombstone, so a late copy of the attempt takes nothing.
func keep(ctx context.Context, l *Lease) (*Lease, error) {
	err := ctx.Err()
	if err == nil {
		if err = l.confirmGrant(ctx); err == nil {
			return l, nil
		}
	}
	_ = l.giveUp(ctx) // releases whatever ctx; if it fails, the hold expires
	return nil, acquireError(ctx, err)
}

// run is Lock but for what ended it (see ended): attempt, and while the
// lock is held wait for a wake-up, the hold's TTL or the waiter refresh.
// A waiter subscribes before the attempt that registers it, so no release
// misses it; the first attempt goes unsubscribed: an uncontended Lock is
// one round trip. Unavailable Redis: pause and retry until ctx ends.
func (wt *waiting) run() (*Lease, error) {
	refusedCopy := false // the first attempt was refused, and may have been sent twice
	if !wt.c.subscribed(wt.channel) {
		switch l, _, err := wt.attempt(); {
		case l != nil:
			if kept, err := wt.keep(l); kept != nil || err != nil {
				return kept, err
			}
		case errors.Is(err, ErrUnavailable): // subscribe, then try again
			wt.observed.wait(wt.ctx, observe.WaitRetry, err)
		case err != nil:
			return nil, acquireError(wt.ctx, err)
		default:
			refusedCopy = wt.maybeCopied
		}
	}
	if err := wt.listen(); err != nil {
		if refusedCopy { // an errored attempt abandoned itself
			wt.a.leave(wt.ctx, "")
		}
		return nil, err
	}
	defer func() { wt.w.Close() }()
	if wt.observed != nil {
		// An Observer's panic leaves the line first: a registration left
		// behind would be handed the lock, held for nobody.
		defer func() {
			if r := recover(); r != nil {
				wt.leave(context.WithoutCancel(wt.ctx))
				panic(r)
			}
		}()
	}
	return wt.loop()
}

// ended is what a wait that ended with err returns: after an outage, the
// outage, not [ErrNotAcquired]: nothing said the lock was taken.
func (wt *waiting) ended(err error) error {
	ctxErr := contextDone(wt.ctx)
	if wt.outage == nil || ctxErr == nil || !errors.Is(err, ErrNotAcquired) {
		return err
	}
	return fmt.Errorf("%w: %w", wt.outage, ctxErr)
}

// waiting is one acquireCall: its call, and where it listens.
type waiting struct {
	c   *Client
	ctx context.Context
	a   *call

	observed    *observedCall // nil when nobody observes
	hub         *notify.Hub
	w           *notify.Waiter
	channel     string
	waiterID    string    // set once a release can reach this waiter: then it registers
	failures    int       // attempts in a row that found Redis unavailable
	outage      error     // what the last attempt met, if Redis was unavailable (see ended)
	answered    time.Time // when Redis last answered an attempt (or the call began)
	maybeCopied bool      // an attempt may have been sent twice (see clientHold.maybeCopied)
	tooLate     error     // the last grant came back too late: back off before the next
}

// attempt makes one attempt, and notes whether it may have been sent twice.
func (wt *waiting) attempt() (*Lease, time.Duration, error) {
	sent := time.Now()
	l, retryIn, err := wt.a.attempt(wt.ctx, wt.waiterID)
	wt.noteOutage(err)
	wt.maybeCopied = wt.maybeCopied || wt.c.mayHaveResent(sent)
	return l, retryIn, err
}

// noteOutage keeps err if Redis is unavailable, or else a dial's failure
// since Redis last answered; an answer clears it.
func (wt *waiting) noteOutage(err error) {
	switch {
	case err == nil:
		wt.outage, wt.answered = nil, time.Now()
	case errors.Is(err, ErrUnavailable):
		wt.outage = err
	default:
		if dialErr := wt.c.dials.Failure(wt.answered); dialErr != nil {
			wt.outage = fmt.Errorf("%w: %s %q: connecting: %w", ErrUnavailable, wt.a.spec.op, wt.a.spec.lease.name, dialErr)
		}
	}
}

// keep is keep for a call that goes on: (nil, nil) when the grant expired
// unconfirmed or Redis was unavailable. The call goes on under a new token:
// a resent copy of the give-back would take the old one's next hold.
func (wt *waiting) keep(l *Lease) (*Lease, error) {
	l.noteCopies(wt.maybeCopied)
	kept, err := keep(wt.ctx, l)
	wt.noteOutage(err)
	if errors.Is(err, errGrantExpired) || errors.Is(err, ErrUnavailable) {
		wt.a.v.fresh() // the give-back left the old token's tombstone
		if errors.Is(err, errGrantExpired) {
			wt.tooLate = err
		} else {
			wt.observed.wait(wt.ctx, observe.WaitRetry, err)
		}
		return nil, nil
	}
	return kept, err
}

// listen subscribes to the channel of the lock in the way, through outages.
func (wt *waiting) listen() error {
	hub, err := wt.c.notifier(wt.ctx)
	for failures := 1; errors.Is(err, ErrUnavailable); failures++ {
		wt.outage = err
		if stop := wt.c.pause(wt.ctx, failures, nil); stop != nil {
			return stop
		}
		hub, err = wt.c.notifier(wt.ctx)
	}
	if err != nil {
		return acquireError(wt.ctx, err)
	}
	ch, _ := wt.a.rewatch()
	wt.hub = hub
	if err := wt.watch(ch); err != nil {
		wt.noteOutage(err)
		return err
	}
	return nil
}

func (wt *waiting) loop() (*Lease, error) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if wt.tooLate != nil {
			if stop := wt.pause(wt.tooLate); stop != nil {
				return nil, stop
			}
			wt.tooLate = nil
		}
		// The waiter registers once a release can reach it (a call that
		// queues, at once). A subscription gone for good (failover, slot
		// move) leaves first, giving back a hand-over it did not hear.
		queues := wt.a.spec.queues
		if wt.waiterID != "" && !wt.w.Subscribed() && !queues {
			if held, err := wt.a.leave(wt.ctx, wt.waiterID); held {
				unheard := errHandOverUnheard
				if err != nil {
					unheard = fmt.Errorf("%w: %w", errHandOverUnheard, err)
				}
				wt.observed.wait(wt.ctx, observe.WaitRetry, unheard)
			}
			if err := wt.watch(wt.channel); err != nil {
				return nil, err
			}
		}
		if wt.waiterID == "" && (wt.w.Subscribed() || queues) {
			wt.waiterID = wt.w.ID()
		}
		l, retryIn, err := wt.attempt()
		if l != nil {
			if kept, err := wt.keep(l); kept != nil || err != nil {
				return kept, err
			}
			continue
		}
		if errors.Is(err, ErrUnavailable) && contextDone(wt.ctx) == nil {
			if stop := wt.pause(err); stop != nil {
				return nil, stop
			}
			continue
		}
		wt.failures = 0
		if err != nil {
			return nil, acquireError(wt.ctx, err)
		}
		if ch, moved := wt.a.rewatch(); moved { // listen where the lock in the way is
			if err := wt.watch(ch); err != nil {
				wt.leave(wt.ctx)
				return nil, err
			}
			continue
		}
		if l, err := wt.wait(timer, retryIn); l != nil || err != nil {
			return l, err
		}
	}
}

var errHandOverUnheard = errors.New("dlock: a lock handed over while the waiter's subscription was lost may have been held, and was given back")

// leave gives up a call that ends refused: its registration, and the
// tombstone for a copy of an attempt that may be on its way.
func (wt *waiting) leave(ctx context.Context) {
	if wt.waiterID != "" || wt.maybeCopied {
		wt.a.leave(ctx, wt.waiterID)
	}
}

// pause waits after an attempt that found Redis unavailable.
func (wt *waiting) pause(err error) error {
	wt.failures++
	if stop := wt.c.pause(wt.ctx, wt.failures, wt.w.C()); stop != nil {
		if wt.waiterID != "" {
			wt.a.leave(wt.ctx, wt.waiterID)
		}
		return stop
	}
	wt.observed.wait(wt.ctx, observe.WaitRetry, err)
	return nil
}

// watch swaps the waiter's subscription, if any, for an unregistered one on
// ch. One refused by ACL is [ErrPermission], not a wait on every hold's TTL.
func (wt *waiting) watch(ch string) error {
	if wt.w != nil {
		wt.w.Close()
	}
	next, err := wt.hub.Watch(wt.ctx, ch)
	if fcall.IsPermission(err) {
		err = redisError("subscribe", wt.a.spec.lease.name, err)
	}
	if err != nil {
		return acquireError(wt.ctx, err)
	}
	wt.w, wt.channel, wt.waiterID = next, ch, ""
	return nil
}

// wait waits after a refused attempt for a wake-up, the hold's TTL
// (retryIn), the refresh or the call's end; (nil, nil): attempt again.
func (wt *waiting) wait(timer *time.Timer, retryIn time.Duration) (*Lease, error) {
	if retryIn == unread {
		retryIn, _ = wt.a.h.cfg.holdTTL()
	}
	if retryIn < 0 {
		retryIn = time.Second // a hold someone else made persistent
	} else {
		// A reply read late used some of the hold's time left.
		retryIn -= min(retryIn, max(0, wt.c.clock.Now().Sub(wt.a.sent)))
	}
	if wt.waiterID != "" {
		retryIn = min(retryIn, wt.a.h.cfg.waiterRefresh)
		wt.observed.wait(wt.ctx, observe.WaitRegistered, nil)
	}
	timer.Reset(retryIn)
	woken, stop := false, error(nil)
	select {
	case <-wt.w.C():
		woken = true
	case <-timer.C:
	case <-wt.ctx.Done():
		stop = acquireError(wt.ctx, nil)
	case <-wt.c.done:
		stop = errClosedWaiting
	}
	// A suspended process acts on what it heard once it resumes.
	wt.c.clock.Wait()
	if woken {
		if l := wt.granted(); l != nil {
			if kept, err := wt.keep(l); kept != nil || err != nil {
				return kept, err
			}
		}
	}
	if stop != nil {
		wt.leave(wt.ctx)
		return nil, stop
	}
	wt.observed.wait(wt.ctx, observe.WaitRetry, nil)
	return nil, nil
}

// pause waits after the failures-th unavailable attempt in a row. It waits a
// random time in the upper half of a backoff doubling from 20ms to 1s, so
// waiters spread out; wake ends it early. A cluster reloads a failover's
// layout.
func (c *Client) pause(ctx context.Context, failures int, wake <-chan struct{}) error {
	if cluster, ok := c.rdb.(*redis.ClusterClient); ok {
		cluster.ReloadState(ctx)
	}
	d := min(20*time.Millisecond<<min(failures-1, 16), time.Second)
	timer := time.NewTimer(d/2 + rand.N(d/2+1))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-wake:
	case <-ctx.Done():
		return acquireError(ctx, nil)
	case <-c.done:
		return errClosedWaiting
	}
	return nil
}

// errClosedWaiting ends a wait whose Client was closed.
var errClosedWaiting = fmt.Errorf("%w: %w", ErrNotAcquired, ErrClosed)

// granted is the lease a wake-up handed the call, if any; none under
// [WithReplicaAck]: the next attempt finds it ours and waits for replicas.
func (wt *waiting) granted() *Lease {
	h, ok := parseHandOver(wt.w.Grant()) // taken whatever follows: a grant is read once
	if !ok || wt.a.grant == nil || wt.a.h.cfg.ack.n > 0 {
		return nil
	}
	l := wt.a.grant.granted(h)
	if l != nil {
		l.stepLocked(leaseHandedOver) // unless confirmed already
		wt.observed.handedOver(wt.ctx, l)
	}
	return l
}

// acquireError is what a failed acquisition returns: ended by its context,
// it matches ErrNotAcquired (or err, if unavailable) and the context's error.
func acquireError(ctx context.Context, err error) error {
	ctxErr := contextDone(ctx)
	switch {
	case ctxErr == nil:
		return err
	case !errors.Is(err, ErrUnavailable):
		return fmt.Errorf("%w: %w", ErrNotAcquired, ctxErr)
	case errors.Is(err, ctxErr):
		return err
	}
	return fmt.Errorf("%w: %w", err, ctxErr)
}

// contextDone is ctx's error, or DeadlineExceeded once its deadline passed:
// a socket deadline may fire before ctx's own timer.
func contextDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}
