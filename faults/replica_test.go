//go:build faults

package faults

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// (8) Sentinel fails the master over to its replica while a lock is held.
// With WithReplicaAck the grant was on the replica before it was returned:
// it survives the failover and a second client is refused. Without, a
// grant the replica never received (its link cut) is lost with the
// master, and a second client gets in: the documented failure mode.
func TestScenario08_ReplicaFailover(t *testing.T) {
	t.Parallel()
	const ttl = 5 * time.Second
	for _, ack := range []bool{true, false} {
		f := redistest.StartFailover(t)
		addUser(t, append(append([]string(nil), redistest.DlockACL...), "+wait"), f.Master, f.Replica)
		ctx := ctxFor(t, time.Minute)
		name := lockName(t)
		opts := []dlock.Option{dlock.WithTTL(ttl)}
		what, allow := "without replica ack, replica behind", []string{"overlaps", "out of order"}
		if ack {
			opts = append(opts, dlock.WithReplicaAck(1, 500*time.Millisecond))
			what, allow = "with WithReplicaAck(1, 500ms)", nil
		}
		var h holders
		if !ack {
			f.Replica.Pause() // the replica falls behind, its link cut
			if err := f.Master.Client().ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
				t.Fatal(err)
			}
		}
		held, err := newClient(t, sentinelClient(t, f), opts...).Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h.res.Enter(0, held.Token(), time.Now())
		f.Master.Kill()
		if !ack {
			f.Replica.Resume()
		}
		if err := f.Promote(ctx); err != nil {
			t.Fatal(err)
		}
		second, err := newClient(t, sentinelClient(t, f), dlock.WithTTL(ttl)).Mutex(name).TryLock(ctx)
		switch {
		case err == nil:
			h.res.Enter(1, second.Token(), time.Now())
			h.res.Exit(1)
			_ = second.Unlock(ctx)
		case !errors.Is(err, dlock.ErrNotAcquired):
			t.Fatalf("second client after the failover: %v", err)
		}
		if held.Err() != nil {
			h.losses.Add(1)
		}
		h.res.Exit(0)
		_ = held.Unlock(ctx)
		r := h.row("08 Sentinel failover during a hold, " + what)
		if allow != nil {
			r.Note = "documented failure mode"
		}
		report(t, r, allow...)
	}
}

// sentinelClient follows the Sentinel's master, logged in as dlock's ACL
// user on the data nodes.
func sentinelClient(t *testing.T, f *redistest.Failover) *redis.Client {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.MasterName,
		SentinelAddrs: []string{f.Sentinel.Addr()}, Username: aclUser, Password: aclPassword})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
