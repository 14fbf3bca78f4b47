package inspect

import (
	"cmp"
	"encoding/json"
	"fmt"
	"time"

	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/observe"
)

// MutexInfo reads describe.lua's reply for a string lock key.
func MutexInfo(reply []any) (admin.LockInfo, error) {
	r, err := fcall.Int64s(reply, 4)
	if err != nil || len(reply) < 7 {
		return admin.LockInfo{}, cmp.Or(err, fcall.ErrUnexpectedReply)
	}
	holderInfo, _ := reply[4].(string)
	info := admin.LockInfo{Kind: observe.KindMutex, Holders: []admin.Holder{{Write: true, Holds: 1, Info: HolderInfo(holderInfo)}},
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

// SemaphoreInfo reads describe.lua's reply for a Semaphore.
func SemaphoreInfo(reply []any) (admin.LockInfo, error) {
	r, err := fcall.Int64s(reply, 5)
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

// permitHolders are a Semaphore's holders, as admin.LockInfo.Holders says,
// from the holder info of each permit held.
func permitHolders(infos []any) []admin.Holder {
	holders := []admin.Holder{{}}
	at := map[string]int{"": 0}
	for _, reply := range infos {
		stored, _ := reply.(string)
		i, ok := at[stored]
		if !ok {
			i = len(holders)
			at[stored] = i
			holders = append(holders, admin.Holder{Info: HolderInfo(stored)})
		}
		holders[i].Holds++
	}
	if holders[0].Holds == 0 {
		holders = holders[1:]
	}
	return holders
}

// HolderInfo reads a holder's info as the scripts store it (dlock's
// WithHolderInfo): nil for none or not a HolderInfo.
func HolderInfo(stored string) *admin.HolderInfo {
	if stored == "" {
		return nil
	}
	var info admin.HolderInfo
	if json.Unmarshal([]byte(stored), &info) != nil {
		return nil
	}
	return &info
}
