package dlock_test

import (
	"cmp"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/family"
	"github.com/dlockio/dlock/internal/redistest"
)

// scriptTrips counts the round trips that carry a script (FCALL, FUNCTION
// LOAD, EVALSHA, EVAL, SCRIPT LOAD), and the replies among their commands
// that say a script is missing (NOSCRIPT, "Function not found").
type scriptTrips struct {
	trips, noScript atomic.Int64
}

func (h *scriptTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count([]redis.Cmder{cmd}, err)
		return err
	}
}

func (h *scriptTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.count(cmds, nil)
		return err
	}
}

// count counts one round trip; err is a lone command's error, which its
// hook sees before the command has it.
func (h *scriptTrips) count(cmds []redis.Cmder, err error) {
	scripted := false
	for _, cmd := range cmds {
		switch cmd.Name() {
		case "fcall", "function", "evalsha", "eval", "script":
			scripted = true
		}
		if missingScript(cmp.Or(err, cmd.Err())) {
			h.noScript.Add(1)
		}
	}
	if scripted {
		h.trips.Add(1)
	}
}

// A server that forgot the scripts (FUNCTION FLUSH, a restart) answers
// "Function not found" to the first call, and dlock loads its library
// then: a first Lock, Extend, TTL and Unlock meet it once, and cost one
// round trip more than on a warm server.
func TestScripts_AFlushedServerCostsEachLockTypeOneRoundTrip(t *testing.T) {
	srv := startServer(t)
	rdb := srv.Client()
	counter := &scriptTrips{}
	rdb.AddHook(counter)
	c := newClient(t, rdb)
	ctx := ctxFor(t, time.Minute)
	for _, k := range serverKinds() {
		lock := func(ctx context.Context, name string) (*dlock.Lease, error) {
			return k.Take(ctx, family.Target{Client: c, Value: "v"}, namesOf(k, name), false)
		}
		t.Run(k.Label(), func(t *testing.T) {
			// Lock, Extend, TTL and Unlock: the round trips with a script,
			// and the NOSCRIPT replies among them.
			use := func() (scripted, noScript int64) {
				t.Helper()
				before, beforeNoScript := tripsNow(counter)
				lease, err := lock(ctx, lockName(t))
				if err != nil {
					t.Fatal(err)
				}
				if err := lease.Extend(ctx, 20*time.Second); err != nil {
					t.Fatal(err)
				}
				if _, err := lease.TTL(ctx); err != nil {
					t.Fatal(err)
				}
				if err := lease.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				after, afterNoScript := tripsNow(counter)
				return after - before, afterNoScript - beforeNoScript
			}
			use() // every connection dialled, every subscription made
			warm, _ := use()
			if err := forgetScripts(ctx, rdb); err != nil {
				t.Fatal(err)
			}
			cold, noScript := use()
			if noScript != 1 || cold != warm+1 {
				t.Errorf("after a flush: %d missing-script replies, %d round trips with scripts (%d warm); want 1 and %d",
					noScript, cold, warm, warm+1)
			}
		})
	}
}

func tripsNow(h *scriptTrips) (trips, noScript int64) { return h.trips.Load(), h.noScript.Load() }

// A cluster client's slot map may be stale when a call meets NOSCRIPT: the
// call followed MOVED to its slot's new master, and the map still names
// the old one, where the scripts then go. Should that node fail the load
// (an old master down or stalled after a failover; here, a node whose user
// may load neither the library nor the scripts, which also makes the
// Client send EVALSHA), the scripts still go to every master, and the call
// is sent again on its own master, which takes them.
func TestScripts_ALoadOnAStaleMasterOfTheKeyFallsBackToEveryMaster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	ctx := ctxFor(t, time.Minute)
	name, slot, rdb := onStaleMap(ctx, t, cl) // the map from before the slot moves
	c := newClient(t, rdb)
	if err := cl.MigrateSlot(ctx, slot, 1, nil); err != nil {
		t.Fatal(err)
	}
	for _, n := range cl.Nodes {
		if err := forgetScripts(ctx, n.Client()); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Nodes[0].Client().Do(ctx, "ACL", "SETUSER", "default", "-script|load", "-function|load").Err(); err != nil {
		t.Fatal(err)
	}
	lease, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock on the slot's new master, which can load the scripts: %v", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// onStaleMap is a lock name whose slot master 0 of cl serves, that slot,
// and a cluster client whose slot map stays as it is now: as go-redis's is
// after a slot moves, until its reload after MOVED lands (which may wait
// on a stalled master: it asks a node at random).
func onStaleMap(ctx context.Context, t *testing.T, cl *redistest.Cluster) (name string, slot int, rdb *redis.ClusterClient) {
	t.Helper()
	for {
		name = lockName(t)
		slot = dlock.ClusterSlot(name)
		owner, err := cl.SlotOwner(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		if owner == 0 {
			break
		}
	}
	before, err := cl.Client().ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	rdb = redis.NewClusterClient(&redis.ClusterOptions{
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) { return before, nil },
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return name, slot, rdb
}
