package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/family"
	"github.com/dlockio/dlock/internal/scripts"
)

// Expire makes the lock called name vanish as if its holders' TTLs ran out:
// every hold of it is removed (any lock type). Each holder's lease reports
// the loss at its next renewal, within a third of its TTL (give the Client
// a short [dlock.WithTTL] to see it at once), as an expiry: its error
// matches [dlock.LossExpired]. Its waiters are woken. The fencing counter
// stays, so the next holder's token is higher. It returns an error if
// nothing held the lock.
func (r *Redis) Expire(ctx context.Context, name string) error {
	defer r.faults.holdRenewals()()
	return r.expire(ctx, name)
}

// expire removes every hold of name, with no mark of a forced removal: a
// renewal then finds the hold gone, as after an expiry. Renewals must be
// held back (holdRenewals): one between the two steps would find the mark.
func (r *Redis) expire(ctx context.Context, name string) error {
	held, err := r.operator().ForceUnlock(ctx, name)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("dlocktest: nothing holds %q", name)
	}
	return r.admin.Del(ctx, r.prefix+"{"+name+"}"+scripts.ForcedSuffix).Err()
}

// Steal removes every hold of the lock called name and takes it for a new
// owner, as a second process would after the first lost it: the lock of a
// Mutex, FairMutex or Election, an RWMutex's write side, or a Semaphore's
// permit. The holders' leases report the loss at their next renewal, with
// [dlock.LossTaken] where the hold names its owner, else
// [dlock.LossExpired]; the new lease's token is above theirs. Unlock it to
// end the theft. A waiter woken by the removal may take the lock first:
// then Steal fails with [dlock.ErrNotAcquired], and the holders have lost
// it all the same.
func (r *Redis) Steal(ctx context.Context, name string) (*dlock.Lease, error) {
	op := r.operator()
	info, err := op.Describe(ctx, name)
	if err != nil {
		return nil, err
	}
	if info.Kind == "" {
		return nil, fmt.Errorf("dlocktest: nothing holds %q", name)
	}
	// No renewal may come between the removal and the theft: it would
	// find the lock gone, not taken.
	defer r.faults.holdRenewals()()
	if err := r.expire(ctx, name); err != nil {
		return nil, err
	}
	taker := family.MustOf(family.MustOf(info.Kind).Takeover)
	return taker.Take(ctx, family.Target{Client: op, Permits: info.Permits}, []string{name}, true)
}

// StallRenewals delays every renewal (and [dlock.Lease.Extend]) of every
// Client made by [Redis.Client] by d before it is sent: beyond a third of
// a lease's TTL, the lease goes at risk ([dlock.Lease.AtRisk]), then is
// lost at its deadline. 0 ends the stall.
func (r *Redis) StallRenewals(d time.Duration) { r.faults.set(func(f *faults) { f.stall = d }) }

// Slow delays every command of every Client made by [Redis.Client] by d
// before it is sent. 0 ends the delay.
func (r *Redis) Slow(d time.Duration) { r.faults.set(func(f *faults) { f.slow = d }) }

// Down makes Redis unreachable for every Client made by [Redis.Client]:
// each command and each new connection fails as a refused connection would,
// until [Redis.Up]. Subscriptions already open stay open.
func (r *Redis) Down() { r.faults.set(func(f *faults) { f.down = true }) }

// Up ends [Redis.Down].
func (r *Redis) Up() { r.faults.set(func(f *faults) { f.down = false }) }

// Disconnect makes Redis unreachable for c alone, a Client made by
// [Redis.Client], as [Redis.Down] does for all: c's leases are lost at
// their deadline, as a partitioned process's are, while the other Clients
// go on and take over. It lasts until [Redis.Reconnect]. It returns an
// error for a Client this Redis did not make.
func (r *Redis) Disconnect(c *dlock.Client) error { return r.cut(c, true) }

// Reconnect ends [Redis.Disconnect] of c.
func (r *Redis) Reconnect(c *dlock.Client) error { return r.cut(c, false) }

func (r *Redis) cut(c *dlock.Client, down bool) error {
	r.mu.Lock()
	h := r.hooks[c]
	r.mu.Unlock()
	if h == nil {
		return errors.New("dlocktest: a Client not made by this Redis's Client method")
	}
	h.cut.Store(down)
	return nil
}

// ErrDown is the cause of the errors commands get while Redis is [Redis.Down].
var ErrDown = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

// operator is a Client without faults, for the faults themselves.
func (r *Redis) operator() *dlock.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.op == nil {
		r.op = mustNew(r.admin, dlock.WithPrefix(r.prefix))
		r.closers = append(r.closers, r.op.Close)
	}
	return r.op
}

// faults are those of every Client made by Redis.Client.
type faults struct {
	mu    sync.Mutex
	stall time.Duration
	slow  time.Duration
	down  bool

	// held is set while renewals are held back (holdRenewals), and closed when
	// they may go on. renewing counts those sent, not yet answered. It is
	// added to only while held is nil: never while holdRenewals waits on it.
	held     chan struct{}
	renewing sync.WaitGroup
	holdMu   sync.Mutex // one holdRenewals at a time
}

func (f *faults) set(change func(*faults)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

// holdRenewals holds back every renewal not yet sent, waits for those
// sent to be answered, and returns what lets them go on: what Expire and
// Steal do meanwhile, no renewal sees half done.
func (f *faults) holdRenewals() (release func()) {
	f.holdMu.Lock()
	f.set(func(f *faults) { f.held = make(chan struct{}) })
	f.renewing.Wait()
	return func() {
		f.set(func(f *faults) { close(f.held); f.held = nil })
		f.holdMu.Unlock()
	}
}

// renewal waits while renewals are held back, then counts one sent; done
// counts it answered.
func (f *faults) renewal(ctx context.Context) (done func(), err error) {
	for {
		f.mu.Lock()
		held := f.held
		if held == nil {
			f.renewing.Add(1)
			f.mu.Unlock()
			return f.renewing.Done, nil
		}
		f.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// clientFaults is the go-redis hook of one Client made by Redis.Client:
// the faults of all, and its own cut (Redis.Disconnect).
type clientFaults struct {
	all *faults
	cut atomic.Bool
}

func (h *clientFaults) down() bool {
	h.all.mu.Lock()
	defer h.all.mu.Unlock()
	return h.all.down || h.cut.Load()
}

// around runs send, the sending of cmds, with the faults. An error is
// each command's that has none of its own.
func (h *clientFaults) around(ctx context.Context, cmds []redis.Cmder, send func() error) (err error) {
	defer func() {
		for _, cmd := range cmds {
			if err != nil && cmd.Err() == nil {
				cmd.SetErr(err)
			}
		}
	}()
	f := h.all
	renewal := anyRenewal(cmds)
	f.mu.Lock()
	delay := f.slow
	if f.stall > 0 && renewal {
		delay += f.stall
	}
	f.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if h.down() {
		return ErrDown
	}
	if renewal {
		done, err := f.renewal(ctx)
		if err != nil {
			return err
		}
		defer done()
	}
	return send()
}

func (h *clientFaults) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.down() {
			return nil, ErrDown
		}
		return next(ctx, network, addr)
	}
}

func (h *clientFaults) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.around(ctx, []redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (h *clientFaults) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.around(ctx, cmds, func() error { return next(ctx, cmds) })
	}
}

// renewals are the scripts that extend a hold: renewals and Extend.
var renewals = family.ScriptSet(func(s family.Scripts) *redis.Script { return s.Extend })

func anyRenewal(cmds []redis.Cmder) bool {
	return slices.ContainsFunc(cmds, func(cmd redis.Cmder) bool {
		args := cmd.Args()
		if len(args) < 2 {
			return false
		}
		name, _ := args[0].(string)
		id, _ := args[1].(string) // a function's name (FCALL) or a SHA (EVALSHA)
		return (strings.EqualFold(name, "fcall") || strings.EqualFold(name, "evalsha")) && slices.Contains(renewals, scripts.Of(id))
	})
}
