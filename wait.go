package dlock

import (
	"context"
	"fmt"
	"time"
)

// attempt makes one try at a lock. It returns the lease when granted;
// otherwise retryIn, how long until the current hold expires at the latest
// (negative: unknown), with a nil error.
type attempt func(ctx context.Context) (l *Lease, retryIn time.Duration, err error)

// noExpiryRetry bounds a wait on a hold that reported no TTL (a key someone
// made persistent outside dlock), when no wake-up comes.
const noExpiryRetry = time.Second

// tryOnce is TryLock: one attempt, never a wait.
func tryOnce(ctx context.Context, try attempt) (*Lease, error) {
	l, _, err := try(ctx)
	if err != nil {
		return nil, acquireError(ctx, err)
	}
	if l == nil {
		return nil, ErrNotAcquired
	}
	return l, nil
}

// waitFor is Lock: attempt, and while the lock is held, wait for its release
// (a wake-up on channel) or for the hold's TTL to run out, then attempt again.
//
// The first attempt goes without a subscription, so an uncontended Lock costs
// one round trip. After a failure the waiter subscribes first and attempts
// again before it waits: a release published after that attempt reaches it.
func (c *Client) waitFor(ctx context.Context, cfg settings, channel string, try attempt) (*Lease, error) {
	if cfg.waitSet {
		if cfg.wait == 0 {
			return tryOnce(ctx, try)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.wait)
		defer cancel()
	}
	if l, _, err := try(ctx); l != nil || err != nil {
		return l, acquireError(ctx, err)
	}

	hub, err := c.notifier(ctx)
	if err != nil {
		return nil, acquireError(ctx, err)
	}
	w, err := hub.Watch(ctx, channel)
	if err != nil {
		return nil, acquireError(ctx, err)
	}
	woken := false
	defer func() { w.Close(woken) }() // hand on a wake-up we did not turn into a hold

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		l, retryIn, err := try(ctx)
		if l != nil {
			woken = false
			return l, nil
		}
		if err != nil {
			return nil, acquireError(ctx, err)
		}
		woken = false
		if retryIn < 0 {
			retryIn = noExpiryRetry
		}
		timer.Reset(retryIn)
		select {
		case <-w.C():
			woken = true
		case <-timer.C:
		case <-ctx.Done():
			return nil, acquireError(ctx, nil)
		}
	}
}

// acquireError makes what a failed acquisition returns: a wait that ended
// with its context matches both ErrNotAcquired and the context's error.
func acquireError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%w: %w", ErrNotAcquired, ctxErr)
	}
	return err
}
