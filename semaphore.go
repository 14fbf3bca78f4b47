package dlock

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
)

// Semaphore is a distributed counting semaphore: at most its number of
// permits are held at a time, each a [Lease] of its own. The number lives
// in Redis, set by the first acquisition, so every client agrees on it:
// while a permit is held, a handle opened with another number fails with
// [ErrPermits] ([Semaphore.SetPermits] changes it). It goes with the last
// permit. A Semaphore is a handle, safe for concurrent use.
type Semaphore struct {
	handle
	permits atomic.Int64
	spec    *acquireSpec

	setPermitsKeys []string // the KEYS of SetPermits
}

var semKind = &leaseKind{
	extend:  scripts.SemExtend,
	release: scripts.SemRelease,
	ttl:     scripts.SemTTL,
	abandon: scripts.SemAbandon,
}

// Semaphore returns the semaphore called name, with permits permits (1 to
// 2^53-1), options and bad input as [Client.Mutex]'s. Another lock type of
// the same name fails with [ErrWrongType].
func (c *Client) Semaphore(name string, permits int, opts ...Option) *Semaphore {
	s := &Semaphore{handle: c.newHandle(name, opts, optionScope{"Semaphore", forMutex.takes})}
	s.permits.Store(int64(permits))
	if c != nil && s.err == nil {
		s.err = validPermits(name, permits)
	}
	// Extend and TTL take the holders, their tokens and the number of
	// permits, which expires with them.
	var more [][]string
	s.spec, more = s.layOut(acquireSpec{op: "acquire", script: scripts.SemAcquire, lease: leaseSpec{kind: semKind}},
		nil, scripts.SemLayout.Before("WAITERS"), scripts.LayoutOf(scripts.SemSetPermits))
	s.setPermitsKeys = more[0]
	return s
}

// maxPermits is the most permits a Semaphore has: Lua's doubles hold every
// integer up to it exactly.
const maxPermits = 1<<53 - 1

func validPermits(name string, n int) error {
	if n <= 0 || n > maxPermits {
		return invalidf("semaphore %q with %d permits: want 1 to %d", name, n, maxPermits)
	}
	return nil
}

// Permits returns the number of permits this handle expects.
func (s *Semaphore) Permits() int { return int(s.permits.Load()) }

// TryAcquire makes one attempt to take a permit and never waits. It returns
// [ErrNotAcquired] when all permits are held.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Lease, error) {
	return s.acquire(ctx, observe.KindSemaphore, true, s.call)
}

// Acquire takes a permit, waiting for one to be released while all are held,
// until ctx ends or the wait set by [WithWait] runs out. A wait that ends
// that way returns an error matching both [ErrNotAcquired] and ctx's error.
func (s *Semaphore) Acquire(ctx context.Context) (*Lease, error) {
	return s.acquire(ctx, observe.KindSemaphore, false, s.call)
}

// SetPermits changes the number of permits of the semaphore in Redis, and
// of this handle, to n. Other handles opened with the old number then fail
// with [ErrPermits] until they are opened anew, or until the number goes
// with the last permit (10 of this handle's TTLs when none is held).
// Permits held above a lower number are not taken back.
func (s *Semaphore) SetPermits(ctx context.Context, n int) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := validPermits(s.name, n); err != nil {
		return err
	}
	publish, err := s.c.publishCommand(ctx)
	if err != nil {
		return err
	}
	ttl, _ := s.cfg.holdTTL()
	if err := fcall.Run(ctx, &s.c.fns, s.c.rdb, scripts.SemSetPermits, s.setPermitsKeys,
		scripts.SetPermitsArgs{Permits: n, Publish: publish, TTL: ttl.Milliseconds()}).Err(); err != nil {
		return redisError("set permits", s.name, err)
	}
	s.permits.Store(int64(n))
	return nil
}

// semCall is one TryAcquire or Acquire call.
type semCall struct {
	call
	s *Semaphore
}

func (s *Semaphore) call(context.Context) *call {
	a := &semCall{s: s}
	return a.begin(&s.handle, s.spec, a)
}

func (a *semCall) request(waiterID string, _ any) ([]any, string) {
	entry := a.entry(waiterID)
	return command(&a.call, entry, scripts.SemAcquireArgs{Acquire: a.shared(entry), Permits: a.s.permits.Load(), Info: a.spec.info}), entry
}

func (a *semCall) refused(res []int64, _ string) error {
	if res[0] == -2 { // nothing was done, no waiter registered
		return fmt.Errorf("%w: %q has %d permits in Redis, this handle %d", ErrPermits, a.s.name, res[1], a.s.permits.Load())
	}
	return nil
}
