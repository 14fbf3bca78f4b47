package fcall

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
)

// A batch for one master, one of its calls on a slot migrating away: that
// call goes again, alone, with ASKING, to the importing node and is judged
// by that node's WAIT; the others keep the first master's WAIT; a call that
// failed has no WAIT to judge, and its own error. The importing node's
// replica is stopped, the first master's is not: the WAIT replies differ.
func TestSendAcknowledged_ARedirectedCallHasItsOwnWait(t *testing.T) {
	c := redistest.StartReplicatedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := c.Client()
	// Three fencing counters on Nodes[0], each of a slot of its own.
	var locks []string
	slots := map[int64]bool{}
	for i := 0; len(locks) < 3; i++ {
		lock := fmt.Sprintf("{ack-%d}", i)
		slot := rdb.ClusterKeySlot(ctx, lock).Val()
		if owner, err := c.SlotOwner(ctx, int(slot)); err != nil {
			t.Fatal(err)
		} else if owner == 0 && !slots[slot] {
			slots[slot] = true
			locks = append(locks, lock)
		}
	}
	if err := rdb.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }); err != nil {
		t.Fatal(err) // the client knows the layout
	}
	// locks[1]'s slot migrates to Nodes[1]: Nodes[0] answers ASK for it.
	slot := int(rdb.ClusterKeySlot(ctx, locks[1]).Val())
	src, dst := c.Nodes[0].Client(), c.Nodes[1].Client()
	srcID, dstID := src.ClusterMyID(ctx).Val(), dst.ClusterMyID(ctx).Val()
	if err := dst.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := src.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err(); err != nil {
		t.Fatal(err)
	}
	// locks[2]'s counter holds what no script wrote: its call fails.
	if err := src.HSet(ctx, scripts.RedlockFenceLayout.Keys(locks[2])[0], "x", "y").Err(); err != nil {
		t.Fatal(err)
	}
	c.Replicas[1].Pause()
	defer c.Replicas[1].Resume()

	var calls []Call
	for _, lock := range locks {
		keys := scripts.RedlockFenceLayout.Keys(lock) // one key: an importing node serves it, absent, after ASKING
		calls = append(calls, Call{Script: scripts.RedlockFence, Argv: Argv(scripts.RedlockFence, keys, scripts.FenceArgs{Token: 7})})
	}
	var fns Functions
	acks := SendAcknowledged(ctx, &fns, rdb, calls, 1, 300*time.Millisecond)
	for i, want := range []int64{1, 0} {
		if n, err := calls[i].Cmd.Int64(); err != nil || n != 1 {
			t.Fatalf("call %d: %v, %v; want 1", i, n, err)
		}
		if got, err := acks[i].Int64(); err != nil || got != want {
			t.Errorf("call %d's WAIT: %d, %v; want %d", i, got, err, want)
		}
	}
	if err := calls[2].Cmd.Err(); err == nil || acks[2] != nil {
		t.Errorf("the call on a foreign key: %v, WAIT %v; want its error and no WAIT", err, acks[2])
	}
	if n := dst.ClusterCountKeysInSlot(ctx, slot).Val(); n == 0 {
		t.Error("the redirected call wrote nothing on the importing node")
	}
	if n := src.ClusterCountKeysInSlot(ctx, slot).Val(); n != 0 {
		t.Errorf("%d keys of the migrating slot written on its old owner", n)
	}
}
