package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlockio/dlock/internal/scripts"
)

// Holder is one owner holding a lock.
type Holder struct {
	Owner string // the owner id; "" for a Mutex, whose owner token is a secret
	Write bool   // holds the exclusive (write) side; else reads
	Holds int    // how many holds (re-entries counted)

	// Info is what the holder stored with [WithHolderInfo]; nil when it
	// stored none (or its lock type keeps none).
	Info *HolderInfo
}

// LockInfo is what [Client.Describe] found under a lock name.
type LockInfo struct {
	Name           string
	Type           string        // "Mutex" (also a FairMutex with nobody queued, and a MultiLock's part), "FairMutex", "Election", "RWMutex" (also a ReentrantMutex's), "Semaphore", or "" when nothing holds it
	LeaderValue    string        // an Election's: the value its leader campaigned with; else ""
	Holders        []Holder      // the writer (or a Mutex's holder) first; for a Semaphore, one Holder per holder info counting its permits (those without info first)
	Permits        int           // a Semaphore's number of permits; else 0
	TTL            time.Duration // until the last hold expires unless renewed; -1: no expiry; 0: not held
	WritersWaiting int           // waiting Locks registered to be woken (a Mutex's, or an RWMutex's writers)
	ReadersWaiting int           // waiting RLocks registered to be woken
	LastToken      uint64        // the highest fencing token minted for the name; 0 once its counter expired (see [Lease.Token])
}

// Describe reports who holds the lock called name, whatever its type, how
// long it has left and who waits: for operators and tools such as
// `dlock status`. It is one script, one round trip, and changes nothing.
// A key of the name holding what dlock did not write (a string that is no
// owner token, a hash without the mark of a read-write lock's state…) is
// no holder: Describe fails with [ErrWrongType], naming the key.
func (c *Client) Describe(ctx context.Context, name string) (LockInfo, error) {
	if err := c.checkName(ctx, name); err != nil {
		return LockInfo{}, err
	}
	reply, err := runScript(ctx, c.rdb, scripts.Describe, anyLockKeys(keysFor(c.cfg.prefix, name)), "").Slice()
	if err != nil {
		return LockInfo{}, redisError("describe", name, err)
	}
	info := LockInfo{Name: name}
	switch kind, _ := reply[0].(string); kind {
	case "mutex":
		r, err := int64s(reply[1:], 4)
		if err == nil && len(reply) < 8 {
			err = errUnexpectedReply
		}
		if err != nil {
			return LockInfo{}, redisError("describe", name, err)
		}
		holderInfo, _ := reply[5].(string)
		info.Type, info.Holders = "Mutex", []Holder{{Write: true, Holds: 1, Info: decodeHolderInfo(holderInfo)}}
		switch sort, _ := reply[6].(string); sort {
		case "election":
			info.Type, info.LeaderValue = "Election", fmt.Sprint(reply[7])
		case "fair":
			info.Type = "FairMutex"
		}
		info.TTL = time.Duration(r[1]) * time.Millisecond
		if r[1] < 0 {
			info.TTL = -1
		}
		info.WritersWaiting, info.LastToken = int(r[2]), uint64(r[3])
		return info, nil
	case "semaphore":
		r, err := int64s(reply[1:], 5)
		if err != nil {
			return LockInfo{}, redisError("describe", name, err)
		}
		if r[0] > 0 {
			info.Type, info.Holders = "Semaphore", permitHolders(reply[6:])
		}
		info.TTL = time.Duration(r[1]) * time.Millisecond
		info.WritersWaiting, info.LastToken, info.Permits = int(r[2]), uint64(r[3]), int(r[4])
		return info, nil
	}
	s, err := parseHoldState(reply)
	if err != nil {
		return LockInfo{}, redisError("describe", name, err)
	}
	if len(s.holders) > 0 {
		info.Type = "RWMutex"
	}
	info.Holders, info.TTL = s.holders, s.ttl
	info.WritersWaiting, info.ReadersWaiting, info.LastToken = s.writersWaiting, s.readersWaiting, s.lastToken
	return info, nil
}

// permitHolders are a Semaphore's holders from the holder info of each
// permit held: one Holder per distinct info, counting its permits, those
// without info first and together (so a Semaphore whose holders store
// none has one Holder counting every permit).
func permitHolders(infos []any) []Holder {
	holders := []Holder{{}}
	at := map[string]int{"": 0}
	for _, reply := range infos {
		stored, _ := reply.(string)
		i, ok := at[stored]
		if !ok {
			i = len(holders)
			at[stored] = i
			holders = append(holders, Holder{Info: decodeHolderInfo(stored)})
		}
		holders[i].Holds++
	}
	if holders[0].Holds == 0 {
		holders = holders[1:]
	}
	return holders
}

// ForceUnlock removes the lock called name whatever holds it (any type:
// the holds of a Semaphore's every permit, a MultiLock's lock of that name),
// and wakes its waiters: the operator's escape hatch for a lock whose holder is known to
// be gone. The holders' leases report the loss at their next renewal (within
// TTL/3), a Mutex's, FairMutex's or Election's as [LossForced] (the removal
// leaves a mark naming the owner, under the name's ":forced" key, for as
// long as the hold had left); until then they may still act as holders, which is what fencing
// tokens are for: the fencing counter is kept, so the next holder's token is
// above theirs. It reports whether anything was held. It removes only what
// dlock wrote: when a key of the name holds anything else, it fails with
// [ErrWrongType], naming the key, and removes nothing.
func (c *Client) ForceUnlock(ctx context.Context, name string) (bool, error) {
	if err := c.checkName(ctx, name); err != nil {
		return false, err
	}
	publish, err := c.publishCommand(ctx)
	if err != nil {
		return false, err
	}
	n, err := runScript(ctx, c.rdb, scripts.ForceUnlock, anyLockKeys(keysFor(c.cfg.prefix, name)), publish).Int64()
	if err != nil {
		return false, redisError("force unlock", name, err)
	}
	return n == 1, nil
}

// anyLockKeys are the KEYS of the scripts for a lock of any type
// (describe.lua, force_unlock.lua): those of rw_lib.lua, then the keys only
// other types have. Each script looks at every one to tell whether the
// name's keys are all dlock's.
func anyLockKeys(k keys) []string {
	return append(rwScriptKeys(k), k.lock+":permits", k.lock+":tokens", k.lock+":queue", k.lock+":leader", k.forced(), k.holderInfo())
}

func (c *Client) checkName(ctx context.Context, name string) error {
	if err := c.usable(ctx); err != nil {
		return err
	}
	return validateName(name)
}
