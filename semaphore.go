package dlock

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dlockio/dlock/internal/scripts"
)

// Semaphore is a distributed counting semaphore: at most its number of
// permits are held at a time. Each permit is a [Lease] of its own, with a
// fencing token, renewal and loss notification; a holder that crashes gives
// its permit back within its TTL while the other holders renew theirs.
//
// The number of permits lives in Redis, set by the first acquisition, so
// that every client agrees on it: a handle opened with another number fails
// with [ErrPermits] until it is changed deliberately ([Semaphore.SetPermits]).
// A Semaphore is a handle, safe for concurrent use.
type Semaphore struct {
	c       *Client
	name    string
	keys    keys
	cfg     settings
	permits atomic.Int64
	err     error // bad arguments, returned before any I/O

	// KEYS of the scripts in sem_lib.lua's order, up to the fencing counter:
	// made once, shared by every attempt and lease.
	scriptKeys []string
}

var semKind = &leaseKind{
	extend:  scripts.SemExtend,
	release: scripts.SemRelease,
	ttl:     scripts.SemTTL,
	abandon: scripts.SemAbandon,
}

// Semaphore returns the semaphore called name, with permits permits.
// Options override the Client's defaults for it. Nothing is sent to Redis;
// a bad name, option or number of permits (≤ 0) is returned by the first
// acquisition, matching [ErrInvalid].
//
// A Semaphore's keys are its own type: a Mutex or another lock type of the
// same name fails with [ErrWrongType].
func (c *Client) Semaphore(name string, permits int, opts ...Option) *Semaphore {
	if c == nil {
		return &Semaphore{name: name, err: invalidf("nil dlock.Client")}
	}
	cfg := c.cfg.with(opts)
	k := c.waitingKeys(cfg.prefix, name)
	s := &Semaphore{c: c, name: name, cfg: cfg, keys: k,
		scriptKeys: []string{k.lock, k.lock + ":tokens", k.lock + ":permits", k.waiters, k.channel, k.fence}}
	s.permits.Store(int64(permits))
	switch {
	case permits <= 0:
		s.err = invalidf("semaphore %q with %d permits", name, permits)
	default:
		if s.err = validateName(name); s.err == nil {
			s.err = cfg.validate(forSemaphore)
		}
	}
	return s
}

// Positions in a Semaphore's scriptKeys.
const (
	semLeaseKeys   = 2 // extend and TTL: holders and tokens
	semReleaseKeys = 5 // release: up to the channel
)

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns the number of permits this handle expects.
func (s *Semaphore) Permits() int { return int(s.permits.Load()) }

// TryAcquire makes one attempt to take a permit and never waits. It returns
// [ErrNotAcquired] when all permits are held.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Lease, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if o := s.cfg.observer; o != nil {
		return o.acquire(ctx, KindSemaphore, s.name, true, s.tryAcquire)
	}
	return s.tryAcquire(ctx)
}

func (s *Semaphore) tryAcquire(ctx context.Context) (*Lease, error) { return tryOnce(ctx, s.call()) }

// Acquire takes a permit, waiting for one to be released while all are
// held, until ctx ends or the wait set by [WithWait] runs out. A wait that
// ends that way returns an error matching both [ErrNotAcquired] and ctx's
// error. Unless [WithLeaseTime] was given, the permit's lease renews itself
// every TTL/3 until it is unlocked or lost.
func (s *Semaphore) Acquire(ctx context.Context) (*Lease, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if o := s.cfg.observer; o != nil {
		return o.acquire(ctx, KindSemaphore, s.name, s.cfg.triesOnce(), s.acquire)
	}
	return s.acquire(ctx)
}

func (s *Semaphore) acquire(ctx context.Context) (*Lease, error) {
	return s.c.waitFor(ctx, s.cfg, s.keys.own, s.call())
}

// SetPermits changes the number of permits of the semaphore in Redis, and
// of this handle, to n. Other handles opened with the old number then fail
// with [ErrPermits] until they are opened anew. Permits held above a lower
// number are not taken back: no new one is granted until the holders are
// fewer than n.
func (s *Semaphore) SetPermits(ctx context.Context, n int) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if n <= 0 {
		return invalidf("semaphore %q with %d permits", s.name, n)
	}
	publish, err := s.c.publishCommand(ctx)
	if err != nil {
		return err
	}
	if err := runScript(ctx, s.c.rdb, scripts.SemSetPermits, s.scriptKeys, n, publish).Err(); err != nil {
		return redisError("set permits", s.name, err)
	}
	s.permits.Store(int64(n))
	return nil
}

func (s *Semaphore) check(ctx context.Context) error {
	if s.err != nil {
		return s.err
	}
	return s.c.usable(ctx)
}

// semCall is one TryAcquire or Acquire call. All its attempts ask for the
// same permit, under the call's owner token, and share the call's
// tombstone: a copy of an earlier attempt arriving after a later one was
// granted finds that permit and reports it (it takes no second one, and
// registers nothing), and a copy of any of them arriving after the call
// gave up is refused.
type semCall struct {
	s         *Semaphore
	owner     string // the permit's, should it be granted
	tombstone string // named after owner: see keys.tombstone
}

func (s *Semaphore) call() *semCall {
	a := &semCall{s: s}
	a.newCall()
	return a
}

// newCall starts the call anew: a new owner token and a new tombstone, so
// that nothing an earlier start sent counts for it.
func (a *semCall) newCall() {
	a.owner = newOwnerToken()
	a.tombstone = a.s.keys.tombstone(a.owner)
}

func (a *semCall) attempt(ctx context.Context, waiterID string) (*Lease, time.Duration, error) {
	s := a.s
	owner := a.owner
	ttl, _ := s.cfg.holdTTL()
	keys := append(s.scriptKeys[:len(s.scriptKeys):len(s.scriptKeys)], a.tombstone)
	sent := time.Now()
	cmd, unconfirmed := s.c.runAcquire(ctx, s.cfg, scripts.SemAcquire, keys,
		owner, ttl.Milliseconds(), s.c.tagged(waiterID), waiterLease(s.cfg.waiterRefresh).Milliseconds(), s.permits.Load(), s.cfg.holderInfo)
	res, err := cmd.Int64Slice()
	if err == nil && (len(res) != 2 || res[0] == -1) {
		err = errUnexpectedReply // -1 answers only an attempt already abandoned
	}
	if err != nil {
		if !isWrongType(err) {
			a.abandon(ctx, owner, waiterID)
		}
		return nil, 0, redisError("acquire", s.name, err)
	}
	switch {
	case res[0] == 1 && unconfirmed != nil:
		a.abandon(ctx, owner, waiterID)
		return nil, 0, fmt.Errorf("dlock: acquire %q: %w", s.name, unconfirmed)
	case res[0] == 1:
		return s.c.startLease(leaseSpec{
			name: s.name, kind: semKind, keys: s.scriptKeys[:semLeaseKeys], relKeys: s.scriptKeys[:semReleaseKeys], mark: s.keys.lock, tombstone: a.tombstone,
			owner: owner, token: uint64(res[1]), sent: sent, cfg: s.cfg,
		}), 0, nil
	case res[0] == -2: // nothing was done, no waiter registered
		return nil, 0, fmt.Errorf("%w: %q has %d permits in Redis, this handle %d", ErrPermits, s.name, res[1], s.permits.Load())
	}
	return nil, time.Duration(res[1]) * time.Millisecond, nil
}

func (a *semCall) leave(ctx context.Context, waiterID string) { a.abandon(ctx, a.owner, waiterID) }

// abandon gives up the call: an attempt whose outcome is unknown (owner), a
// waiter's registration (waiterID), or both; see sem_abandon.lua. The
// tombstone keeps the call's attempts so far out, so a waiting Acquire that
// goes on (see [ErrUnavailable]) goes on as a new call, with a new owner
// token and tombstone.
func (a *semCall) abandon(ctx context.Context, owner, waiterID string) {
	s := a.s
	keys := append(s.scriptKeys[:len(s.scriptKeys):len(s.scriptKeys)], a.tombstone)
	s.c.abandon(ctx, s.name, semKind.abandon, keys, s.cfg.logger, owner, tombstoneLifeMillis, s.c.tagged(waiterID))
	a.newCall()
}

func (a *semCall) client() *Client { return a.s.c }
