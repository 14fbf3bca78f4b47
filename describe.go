package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/fcall"
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
			info, err = parseMutexInfo(reply[1:])
		case "semaphore":
			info, err = parseSemaphoreInfo(reply[1:])
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

// parseMutexInfo reads describe.lua's reply for a string lock key.
func parseMutexInfo(reply []any) (admin.LockInfo, error) {
	r, err := int64s(reply, 4)
	if err == nil && len(reply) < 7 {
		err = errUnexpectedReply
	}
	if err != nil {
		return admin.LockInfo{}, err
	}
	holderInfo, _ := reply[4].(string)
	info := admin.LockInfo{Kind: observe.KindMutex, Holders: []admin.Holder{{Write: true, Holds: 1, Info: decodeHolderInfo(holderInfo)}},
		TTL: time.Duration(r[1]) * time.Millisecond, WritersWaiting: int(r[2]), LastToken: uint64(r[3])}
	// The kind a key beside the lock tells (scripts.Key's Tells), if any.
	if sort, _ := reply[5].(string); sort != "" {
		info.Kind = observe.Kind(sort)
	}
	if info.Kind == observe.KindElection {
		info.LeaderValue = fmt.Sprint(reply[6])
	}
	if r[1] < 0 {
		info.TTL = -1
	}
	return info, nil
}

// parseSemaphoreInfo reads describe.lua's reply for a Semaphore.
func parseSemaphoreInfo(reply []any) (admin.LockInfo, error) {
	r, err := int64s(reply, 5)
	if err != nil {
		return admin.LockInfo{}, err
	}
	info := admin.LockInfo{TTL: time.Duration(r[1]) * time.Millisecond, WritersWaiting: int(r[2]),
		LastToken: uint64(r[3]), Permits: int(r[4])}
	if r[0] > 0 {
		info.Kind, info.Holders = observe.KindSemaphore, permitHolders(reply[5:])
	}
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

// permitHolders are a Semaphore's holders from the holder info of each
// permit held: one admin.Holder per distinct info, counting its permits,
// those without info first and together.
func permitHolders(infos []any) []admin.Holder {
	holders := []admin.Holder{{}}
	at := map[string]int{"": 0}
	for _, reply := range infos {
		stored, _ := reply.(string)
		i, ok := at[stored]
		if !ok {
			i = len(holders)
			at[stored] = i
			holders = append(holders, admin.Holder{Info: decodeHolderInfo(stored)})
		}
		holders[i].Holds++
	}
	if holders[0].Holds == 0 {
		holders = holders[1:]
	}
	return holders
}

// ForceUnlock removes the lock called name whatever holds it (any type,
// every permit) and wakes its waiters: the escape hatch for a holder known
// to be gone. It reports whether anything was held. The holders' leases
// learn of the loss at their next renewal; fencing covers them until then.
// Options and foreign keys are as [Client.Describe]'s: nothing is removed.
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
