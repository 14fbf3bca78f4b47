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

	"github.com/dlockio/dlock/internal/notify"
)

// acquirer is what a lock type gives the waiting loop.
type acquirer interface {
	// attempt makes one try at the lock. It returns the lease when granted;
	// otherwise retryIn, how long until the current hold expires at the
	// latest (negative: unknown), with a nil error. A non-empty waiterID
	// registers the caller, in the same step as its refusal, to be picked by
	// the next release. An attempt that fails with an error has cleaned up
	// after itself, waiter registration included.
	attempt(ctx context.Context, waiterID string) (l *Lease, retryIn time.Duration, err error)

	// leave unregisters a waiter that stops waiting without the lock, and
	// passes on a wake-up a release may already have sent it. It leaves the
	// call's tombstone, also with no waiterID (a refused attempt that may
	// have been sent twice), and gives back a hold taken under the call's
	// owner that nobody heard of: a copy of a refused attempt, resent by
	// go-redis, granted once the lock was free, or a hand-over.
	leave(ctx context.Context, waiterID string)

	// client is the Client the call runs on.
	client() *Client
}

// queuer is an acquirer whose waiters register even where no wake-up can
// reach them (the subscription failed): registering is how a FairMutex
// waiter keeps its place in line, and a waiter handed the lock finds it at
// its next refresh.
type queuer interface{ queues() }

func queues(a acquirer) bool {
	_, ok := a.(queuer)
	return ok
}

// granter is an acquirer to which a release may hand the lock while it
// waits (a Mutex, a FairMutex): the wake-up then says so (see
// [notify.Waiter.Grant]), and granted returns the lease it makes, or nil
// when the word is stale.
type granter interface {
	granted(h handOver) *Lease
}

// handOver is what a release that handed a waiter the lock told it:
// "[ref:]fence:px" (see hand_next.lua and fair_lib.lua).
type handOver struct {
	ref   string        // what the type sends before the token (a Mutex: the attempt it answers)
	token uint64        // the fencing token minted for the waiter
	valid time.Duration // how long the hand-over holds the lock
}

// parseHandOver reads a release's word; ok is false for anything else.
func parseHandOver(grant string) (h handOver, ok bool) {
	rest, px, found := cutLast(grant)
	if !found {
		return h, false
	}
	ref, fence, _ := cutLast(rest)
	token, err1 := strconv.ParseUint(fence, 10, 64)
	ms, err2 := strconv.ParseInt(px, 10, 64)
	if err1 != nil || err2 != nil || ms <= 0 {
		return h, false
	}
	return handOver{ref: ref, token: token, valid: time.Duration(ms) * time.Millisecond}, true
}

// cutLast splits s around its last colon; without one, all of s is after.
func cutLast(s string) (before, after string, found bool) {
	i := strings.LastIndexByte(s, ':')
	return s[:max(i, 0)], s[i+1:], i >= 0
}

// rewatcher is an acquirer that may be kept out by one of several locks, and
// so waits on the channel of whichever kept it out last (a MultiLock).
type rewatcher interface {
	// rewatch reports the channel to wait on after the last refusal, and
	// whether it is another than before. A waiter registers only on the lock
	// whose channel it listens on, so a move means listening first, then
	// trying again at once.
	rewatch() (channel string, moved bool)
}

// DefaultWaiterRefresh is how often a waiting Lock, registered to be woken
// by the next release, tries again and so renews its registration: a waiter
// that died stops being picked within a few refreshes, and a wake-up sent to
// it holds the others up for one refresh at most.
const DefaultWaiterRefresh = time.Second

// waiterLeaseRefreshes is how many refreshes a registration lasts: a
// waiter that misses one or two (a slow round trip, a pause) keeps its
// place.
const waiterLeaseRefreshes = 3

// waiterLease is how long a registration lasts without renewal; refresh is
// at most [MaxWaiterRefresh], so this does not overflow.
func waiterLease(refresh time.Duration) time.Duration { return waiterLeaseRefreshes * refresh }

// noExpiryRetry bounds a wait on a hold that reported no TTL (a key someone
// made persistent outside dlock), when no wake-up comes.
const noExpiryRetry = time.Second

// tryOnce is TryLock: one attempt, never a wait.
func tryOnce(ctx context.Context, a acquirer) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, acquireError(ctx, err)
	}
	sent := time.Now()
	l, _, err := a.attempt(ctx, "")
	if err != nil {
		return nil, acquireError(ctx, err)
	}
	copied := time.Since(sent) >= a.client().resendAfter
	if l == nil {
		if copied { // a copy of the attempt may be on its way, to take the lock once free
			a.leave(ctx, "")
		}
		return nil, ErrNotAcquired
	}
	l.maybeCopied = copied
	return keep(ctx, l, false)
}

// retryGrant reports whether a waiting Lock tries again after keep failed
// with err: the grant expired before it could be confirmed, or Redis was
// unavailable to confirm it (the next attempt then meets the same and
// pauses, as after any transient error).
func retryGrant(err error) bool {
	return errors.Is(err, errGrantExpired) || errors.Is(err, ErrUnavailable)
}

// keep hands a granted lease to the caller, unless the caller's context
// ended meanwhile: then, as with any cancelled call, the caller gets the
// context's error and the lock is left as it was (given back, and the next
// waiter woken), and the call's tombstone written, as for any call that
// gives up. A client can see a reply after its context ended.
//
// A grant that arrived late (see startLease) is confirmed first, with an
// extension; if that fails, the grant is given back and the error returned.
// A grant that expired before it could be confirmed leaves no tombstone: a
// Lock call then tries again, with the same call token; so does one whose
// confirmation found Redis unavailable, in a call that goes on (waiting:
// see retryGrant).
func keep(ctx context.Context, l *Lease, goesOn bool) (*Lease, error) {
	if ctx.Err() == nil {
		err := l.confirmGrant(ctx)
		if err == nil {
			return l, nil
		}
		if errors.Is(err, errGrantExpired) || goesOn && errors.Is(err, ErrUnavailable) {
			_ = l.unlock(ctx, voidNever)
		} else {
			_ = l.giveUp(ctx)
		}
		return nil, acquireError(ctx, err)
	}
	_ = l.giveUp(ctx) // releases whatever ctx; if it fails, the hold expires
	return nil, acquireError(ctx, nil)
}

// waitFor is Lock: attempt, and while the lock is held, wait to be woken by a
// release or for the hold's TTL to run out, then attempt again.
//
// A waiter subscribes to channel (its Client's own for the lock, for most
// types) before the attempt that registers it, so the release that follows
// cannot be missed: it picks a registered waiter and publishes to it alone,
// whichever client it is in. A granter's release hands it the lock with
// that word, and it holds without another attempt; any other waiter makes
// one attempt per wake-up. While waiting, the waiter tries again every
// waiter refresh, which keeps its registration alive.
//
// Where this Client is not subscribed to the channel yet, the first attempt
// goes without: an uncontended Lock then costs one round trip, and only a
// refused one pays for subscribing.
//
// An attempt that finds Redis unavailable (see [ErrUnavailable]) has
// cleaned up after itself like any failed attempt; the waiter pauses (see
// Client.pause) and tries again, until its context ends. A waiter whose
// subscription is lost for good (see [notify.Waiter.Subscribed]) leaves
// and watches anew.
func (c *Client) waitFor(ctx context.Context, cfg settings, channel string, a acquirer) (*Lease, error) {
	if cfg.waitSet {
		if cfg.wait == 0 {
			return tryOnce(ctx, a)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.wait)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return nil, acquireError(ctx, err)
	}
	observed := cfg.observer.callIn(ctx) // nil when nobody observes
	// Whether an attempt of the call took long enough for the Redis client
	// to have sent it twice: then the lease's release leaves a tombstone for
	// the copy that may still be on its way (see Client.resendAfter).
	maybeCopied := false
	attempt := func(waiterID string) (*Lease, time.Duration, error) {
		sent := time.Now()
		l, retryIn, err := a.attempt(ctx, waiterID)
		maybeCopied = maybeCopied || time.Since(sent) >= c.resendAfter
		if l != nil {
			l.maybeCopied = maybeCopied
		}
		return l, retryIn, err
	}
	if !c.subscribed(channel) {
		l, _, err := attempt("")
		if err != nil && !errors.Is(err, ErrUnavailable) { // unavailable: subscribe, then try again
			return nil, acquireError(ctx, err)
		}
		if l != nil {
			kept, err := keep(ctx, l, true)
			if !retryGrant(err) {
				return kept, err
			}
		}
	}
	hub, err := c.notifier(ctx)
	for failures := 1; errors.Is(err, ErrUnavailable); failures++ {
		if stop := c.pause(ctx, failures, nil); stop != nil {
			return nil, stop
		}
		hub, err = c.notifier(ctx)
	}
	if err != nil {
		return nil, acquireError(ctx, err)
	}
	rw, moves := a.(rewatcher)
	if moves {
		if ch, moved := rw.rewatch(); moved {
			channel = ch
		}
	}
	w, err := hub.Watch(ctx, channel)
	if err != nil {
		return nil, acquireError(ctx, err)
	}
	defer func() { w.Close() }()

	waiterID := "" // set once a release can reach this waiter: then it registers
	failures := 0  // attempts in a row that found Redis unavailable
	if observed != nil {
		// An Observer's Wait that panics leaves, as a give-up does, before
		// the panic goes on: a registration left behind would be handed
		// the lock, held then for nobody until the registration ran out.
		defer func() {
			if r := recover(); r != nil {
				if waiterID != "" {
					a.leave(context.WithoutCancel(ctx), waiterID)
				}
				panic(r)
			}
		}()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if waiterID != "" && !w.Subscribed() && !queues(a) {
			// The subscription it registered with is gone for good (its
			// node failed over, its slot moved): leave, passing on a
			// wake-up it may have had, and listen where the channel is now.
			a.leave(ctx, waiterID)
			w.Close()
			next, err := hub.Watch(ctx, channel)
			if err != nil {
				return nil, acquireError(ctx, err)
			}
			w, waiterID = next, ""
		}
		if waiterID == "" && (w.Subscribed() || queues(a)) {
			waiterID = w.ID()
		}
		l, retryIn, err := attempt(waiterID)
		if l != nil {
			kept, err := keep(ctx, l, true)
			if !retryGrant(err) {
				return kept, err
			}
			continue
		}
		if errors.Is(err, ErrUnavailable) && ctx.Err() == nil {
			// The attempt cleaned up after itself, registration included;
			// the next registers anew.
			failures++
			if stop := c.pause(ctx, failures, w.C()); stop != nil {
				if waiterID != "" {
					a.leave(ctx, waiterID)
				}
				return nil, stop
			}
			observed.wait(ctx, WaitRetry, err)
			continue
		}
		failures = 0
		if err != nil {
			return nil, acquireError(ctx, err)
		}
		if moves {
			if ch, moved := rw.rewatch(); moved {
				// The attempt left the old lock's line: nothing to leave.
				w.Close()
				next, err := hub.Watch(ctx, ch)
				if err != nil {
					return nil, acquireError(ctx, err)
				}
				w, channel = next, ch
				waiterID = ""
				continue
			}
		}
		if retryIn < 0 {
			retryIn = noExpiryRetry
		}
		if waiterID != "" {
			retryIn = min(retryIn, cfg.waiterRefresh)
			observed.wait(ctx, WaitRegistered, nil)
		}
		timer.Reset(retryIn)
		var stop error
		select {
		case <-w.C():
			if l := grantFor(a, w, cfg); l != nil {
				observed.handedOver(ctx, l)
				l.maybeCopied = maybeCopied
				kept, err := keep(ctx, l, true)
				if !retryGrant(err) {
					return kept, err
				}
			}
		case <-timer.C:
		case <-ctx.Done():
			stop = acquireError(ctx, nil)
		case <-c.done:
			stop = fmt.Errorf("%w: %w", ErrNotAcquired, ErrClosed)
		}
		if stop != nil {
			if waiterID != "" || maybeCopied { // a copy of an attempt may be on its way: the tombstone
				a.leave(ctx, waiterID)
			}
			return nil, stop
		}
		observed.wait(ctx, WaitRetry, nil)
	}
}

// Backoff of a waiting Lock whose attempts find Redis unavailable (see
// [ErrUnavailable]): the pause doubles from unavailableRetryMin with each
// failure in a row, up to unavailableRetryMax.
const (
	unavailableRetryMin = 20 * time.Millisecond
	unavailableRetryMax = time.Second
)

// pause waits after the failures-th attempt in a row that found Redis
// unavailable, for a random time in the upper half of the backoff, so that
// waiters failing together do not come back together. A wake-up on wake
// (a release, or a subscription that came back) ends it early. A cluster
// client is told to reload its layout: after a failover or a slot's move
// it sends to the old node until it does. It returns what the wait
// returns, should the wait end instead.
func (c *Client) pause(ctx context.Context, failures int, wake <-chan struct{}) error {
	if cluster, ok := c.rdb.(*redis.ClusterClient); ok {
		cluster.ReloadState(ctx)
	}
	d := min(unavailableRetryMin<<min(failures-1, 16), unavailableRetryMax)
	timer := time.NewTimer(d/2 + rand.N(d/2+1))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-wake:
	case <-ctx.Done():
		return acquireError(ctx, nil)
	case <-c.done:
		return fmt.Errorf("%w: %w", ErrNotAcquired, ErrClosed)
	}
	return nil
}

// grantFor is the lease a wake-up handed to a, if any. Under
// [WithReplicaAck] there is none: the release that handed the lock over
// waited for no replica, so the next attempt, at once, finds the lock ours
// and waits for the replicas to have it.
func grantFor(a acquirer, w *notify.Waiter, cfg settings) *Lease {
	g, ok := a.(granter)
	grant := w.Grant()
	if !ok || grant == "" || cfg.replicaAck > 0 {
		return nil
	}
	h, ok := parseHandOver(grant)
	if !ok {
		return nil
	}
	return g.granted(h)
}

// acquireError makes what a failed acquisition returns: a wait that ended
// with its context matches both ErrNotAcquired and the context's error.
func acquireError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%w: %w", ErrNotAcquired, ctxErr)
	}
	return err
}
