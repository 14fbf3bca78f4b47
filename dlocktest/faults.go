package dlocktest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/scripts"
)

// Expire makes the lock called name vanish as if its holders' TTLs ran out:
// every hold of it is removed (any lock type). Each holder's lease reports
// the loss at its next renewal, within a third of its TTL; its waiters are
// woken. The fencing counter stays, so the next holder's token is higher.
// It returns an error if nothing held the lock.
func (r *Redis) Expire(ctx context.Context, name string) error {
	held, err := r.operator().ForceUnlock(ctx, name)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("dlocktest: nothing holds %q", name)
	}
	return nil
}

// Steal removes every hold of the lock called name and takes it for a new
// owner, as a second process would after the first lost it: a Mutex's (or
// FairMutex's, Election's) lock, an RWMutex's write side (a
// ReentrantMutex's lock), or a Semaphore's permit. The holders' leases
// report the loss at their next renewal, and the returned lease's token is
// above theirs: a fenced resource now refuses their writes. Unlock the
// returned lease to end the theft.
//
// A waiter of the lock, woken by the removal, may take it first: then Steal
// returns an error matching [dlock.ErrNotAcquired], and the holders have
// lost the lock all the same.
func (r *Redis) Steal(ctx context.Context, name string) (*dlock.Lease, error) {
	op := r.operator()
	info, err := op.Describe(ctx, name)
	if err != nil {
		return nil, err
	}
	if info.Type == "" {
		return nil, fmt.Errorf("dlocktest: nothing holds %q", name)
	}
	if _, err := op.ForceUnlock(ctx, name); err != nil {
		return nil, err
	}
	switch info.Type {
	case "RWMutex":
		return op.RWMutex(name).TryLock(ctx)
	case "ReentrantMutex":
		return op.ReentrantMutex(name).TryLock(ctx)
	case "Semaphore":
		return op.Semaphore(name, info.Permits).TryAcquire(ctx)
	default:
		return op.Mutex(name).TryLock(ctx)
	}
}

// StallRenewals delays every renewal of every Client made by
// [Redis.Client] by d before it is sent (and so [dlock.Lease.Extend] too):
// a delay beyond a third of a lease's TTL makes the lease at risk
// ([dlock.Lease.AtRisk]) once half its TTL has gone unconfirmed, then its
// deadline pass before a renewal is confirmed, and the lease reports
// itself lost. 0 ends the stall.
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

// ErrDown is the cause of the errors commands get while Redis is [Redis.Down].
var ErrDown = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

// operator is a Client without faults, for the faults themselves.
func (r *Redis) operator() *dlock.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.op == nil {
		r.op = mustNew(r.admin, dlock.WithPrefix(r.prefix))
	}
	return r.op
}

// faults is the go-redis hook of every Client made by Redis.Client.
type faults struct {
	mu    sync.Mutex
	stall time.Duration
	slow  time.Duration
	down  bool
}

func (f *faults) set(change func(*faults)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

// before is what the faults do to cmds before they are sent.
func (f *faults) before(ctx context.Context, cmds []redis.Cmder) error {
	f.mu.Lock()
	down, delay := f.down, f.slow
	if f.stall > 0 && anyRenewal(cmds) {
		delay += f.stall
	}
	f.mu.Unlock()
	if down {
		return ErrDown
	}
	if delay <= 0 {
		return nil
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *faults) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		f.mu.Lock()
		down := f.down
		f.mu.Unlock()
		if down {
			return nil, ErrDown
		}
		return next(ctx, network, addr)
	}
}

func (f *faults) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := f.before(ctx, []redis.Cmder{cmd}); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (f *faults) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := f.before(ctx, cmds); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// renewalSHAs are the scripts that extend a hold: renewals and Extend.
var renewalSHAs = map[string]bool{
	scripts.MutexExtend.Hash(): true,
	scripts.RWExtend.Hash():    true,
	scripts.SemExtend.Hash():   true,
	scripts.MultiExtend.Hash(): true,
}

func anyRenewal(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		args := cmd.Args()
		if len(args) < 2 {
			continue
		}
		name, _ := args[0].(string)
		sha, _ := args[1].(string)
		if strings.EqualFold(name, "evalsha") && renewalSHAs[sha] {
			return true
		}
	}
	return false
}
