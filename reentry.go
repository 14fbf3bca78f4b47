package dlock

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/scripts"
)

// heldKey is the context key of a hold of a read-write lock: the lock's key,
// which every handle of the lock finds and no other lock's; ownerFor checks
// the Redis too.
type heldKey string

// ownerFor is the owner a call on h with ctx acts as: WithOwner's id; else
// that of the live hold of this lock, on this Redis, that ctx carries (an
// ended lease's context joins nothing); else "", a new owner.
func (h *holdLock) ownerFor(ctx context.Context) string {
	if h.owner != "" {
		return h.owner
	}
	held, ok := ctx.Value(h.heldKey).(*clientHold)
	sameRedis := ok && (held.c == h.c || h.c.redis != "" && held.c.redis == h.c.redis) // see redisIdentity
	if sameRedis && held.lease.heldLocally() == nil {
		return held.owner[1+scripts.OwnerTokenDigits:] // a member is mode, hold id, owner (holdCall.fresh)
	}
	return ""
}

// redisIdentity names the Redis rdb talks to; "" when that cannot be told.
func redisIdentity(rdb redis.UniversalClient) string {
	switch r := rdb.(type) {
	case *redis.Client:
		o := r.Options()
		if o.Addr == "" || o.Addr == "FailoverClient" {
			// A Sentinel client: its options do not name its master.
			return fmt.Sprintf("client %p", r)
		}
		return fmt.Sprintf("standalone %s %s db %d", o.Network, o.Addr, o.DB)
	case *redis.ClusterClient:
		addrs := slices.Clone(r.Options().Addrs)
		slices.Sort(addrs)
		return "cluster " + strings.Join(addrs, " ")
	case *redis.Ring:
		o := r.Options()
		var shards []string
		for name, addr := range o.Addrs {
			shards = append(shards, name+"="+addr)
		}
		slices.Sort(shards)
		return fmt.Sprintf("ring %s db %d", strings.Join(shards, " "), o.DB)
	}
	return ""
}
