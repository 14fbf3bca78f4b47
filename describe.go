package dlock

import (
	"context"

	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/internal/inspect"
	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
)

// Describe reports who holds the lock called name, whatever its type, how
// long it has left and who waits, in one round trip that changes nothing.
// It looks under the Client's prefix, or opts' [WithPrefix]; other options
// fail with [ErrInvalid]. A key of the name holding what dlock did not
// write fails it with [ErrWrongType], naming the key.
func (c *Client) Describe(ctx context.Context, name string, opts ...Option) (admin.LockInfo, error) {
	k, err := c.namedKeys(ctx, name, opts)
	if err != nil {
		return admin.LockInfo{}, err
	}
	reply, err := fcall.Run(ctx, &c.fns, c.rdb, scripts.Describe, scripts.AnyLockLayout.Keys(k.lock), scripts.OwnerArgs{Owner: ""}).Slice()
	var info admin.LockInfo
	if err == nil {
		switch kind, _ := reply[0].(string); kind {
		case "mutex":
			info, err = inspect.MutexInfo(reply[1:])
		case "semaphore":
			info, err = inspect.SemaphoreInfo(reply[1:])
		default:
			info, err = parseRWInfo(reply)
		}
	}
	if err != nil {
		return admin.LockInfo{}, redisError("describe", name, err)
	}
	info.Name = name
	return info, nil
}

// parseRWInfo reads describe.lua's reply for a read-write lock, or a name
// nothing holds: rw_state's (rw_lib.lua).
func parseRWInfo(reply []any) (admin.LockInfo, error) {
	s, reentrant, err := parseHoldState(reply)
	if err != nil {
		return admin.LockInfo{}, err
	}
	info := admin.LockInfo{Holders: s.Holders, TTL: s.TTL, WritersWaiting: s.WritersWaiting,
		ReadersWaiting: s.ReadersWaiting, LastToken: s.LastToken}
	switch {
	case len(s.Holders) == 0:
	case s.ReadHolds > 0:
		info.Kind = observe.KindRead
	case reentrant:
		info.Kind = observe.KindReentrant
	default:
		info.Kind = observe.KindWrite
	}
	return info, nil
}

// ForceUnlock removes the lock called name whatever holds it (any type,
// every permit) and wakes its waiters: the escape hatch for a holder known
// to be gone. It reports whether anything was held. The holders' leases
// learn of the loss at their next renewal; fencing covers them until then,
// as the counter is kept. A key dlock did not write fails it with
// [ErrWrongType], and nothing is removed. Options are as [Client.Describe]'s.
func (c *Client) ForceUnlock(ctx context.Context, name string, opts ...Option) (bool, error) {
	k, err := c.namedKeys(ctx, name, opts)
	if err != nil {
		return false, err
	}
	publish, err := c.publishCommand(ctx)
	if err != nil {
		return false, err
	}
	n, err := fcall.Run(ctx, &c.fns, c.rdb, scripts.ForceUnlock, scripts.AnyLockLayout.Keys(k.lock), scripts.PublishArgs{Publish: publish}).Int64()
	if err != nil {
		return false, redisError("force unlock", name, err)
	}
	return n == 1, nil
}

// namedKeys are the keys of the lock called name, checked before any I/O.
func (c *Client) namedKeys(ctx context.Context, name string, opts []Option) (keys, error) {
	if err := c.usable(ctx); err != nil {
		return keys{}, err
	}
	if err := validateName(name); err != nil {
		return keys{}, err
	}
	cfg := c.cfg.with(opts)
	if err := cfg.validate(forDescribe); err != nil {
		return keys{}, err
	}
	return keysFor(cfg.prefix, name), nil
}
