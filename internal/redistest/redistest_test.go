package redistest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStart_ServesAndRestartsEmpty(t *testing.T) {
	s := Start(t)
	rdb := s.Client()
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	if n, err := rdb.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after restart without persistence: exists=%d err=%v, want 0, nil", n, err)
	}
}

func TestStartCluster_ServesEverySlot(t *testing.T) {
	c := StartCluster(t)
	rdb := c.Client()
	ctx := context.Background()
	for _, key := range []string{"a", "b", "c", "d", "e", "f"} {
		if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
	}
	var shards atomic.Int32 // ForEachMaster calls concurrently
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		shards.Add(1)
		return nil
	})
	if err != nil || shards.Load() != 3 {
		t.Fatalf("masters=%d err=%v, want 3", shards.Load(), err)
	}
}

func TestStartMasters_AreIndependent(t *testing.T) {
	masters := StartMasters(t, 3)
	ctx := context.Background()
	if err := masters[0].Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, m := range masters[1:] {
		if m.Addr() == masters[0].Addr() {
			t.Fatal("two masters share an address")
		}
		if n, err := m.Client().Exists(ctx, "k").Result(); err != nil || n != 0 {
			t.Fatalf("a key written on one master shows on another (exists=%d err=%v)", n, err)
		}
	}
}

func TestCluster_MigrateSlotMovesKeysAndOwnership(t *testing.T) {
	c := StartCluster(t)
	ctx := context.Background()
	rdb := c.Client()
	keys := []string{"{m}a", "{m}b", "{m}c", "{m}d", "{m}e"}
	for _, k := range keys {
		if err := rdb.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot := int(rdb.ClusterKeySlot(ctx, "{m}").Val())
	from, err := c.SlotOwner(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	to := (from + 1) % len(c.Nodes)
	var splitSeen bool
	err = c.MigrateSlot(ctx, slot, to, func() {
		// Split between two nodes: a read of every key still succeeds,
		// through ASK redirections.
		for _, k := range keys {
			if v, err := rdb.Get(ctx, k).Result(); err != nil || v != "v" {
				t.Errorf("GET %s mid-migration: %q, %v", k, v, err)
			}
		}
		splitSeen = true
	})
	if err != nil {
		t.Fatal(err)
	}
	if owner, _ := c.SlotOwner(ctx, slot); owner != to || !splitSeen {
		t.Fatalf("slot %d served by node %d after moving it to %d (split seen %v)", slot, owner, to, splitSeen)
	}
	if n := c.Nodes[to].Client().DBSize(ctx).Val(); n != int64(len(keys)) {
		t.Fatalf("%d keys on the new owner, want %d", n, len(keys))
	}
}

func TestReplicatedCluster_FailOverPromotesTheReplica(t *testing.T) {
	c := StartReplicatedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := c.Client()
	if err := rdb.Set(ctx, "{f}k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	slot := int(rdb.ClusterKeySlot(ctx, "{f}").Val())
	owner, err := c.SlotOwner(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	// The write reaches the replica before the master dies.
	if err := c.Nodes[owner].Client().Do(ctx, "WAIT", 1, 1000).Err(); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if err := c.FailOver(ctx, owner); err != nil {
		t.Fatal(err)
	}
	t.Logf("failed over in %v", time.Since(started))
	rdb.ReloadState(ctx) // a client learns the new topology on its next reload
	if v, err := rdb.Get(ctx, "{f}k").Result(); err != nil || v != "v" {
		t.Fatalf("after the failover: %q, %v", v, err)
	}
	// The old master is back as the new one's replica.
	if err := c.Nodes[owner].Client().Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	if role, _ := c.Replicas[owner].Client().Info(ctx, "replication").Result(); !strings.Contains(role, "role:slave") {
		t.Fatalf("the old master after the failover:\n%s", role)
	}
}

// TestPid_IsTheServersOwnWhileItRuns: the pid is the one the server
// reports, a new one after a restart, and 0 once it is killed.
func TestPid_IsTheServersOwnWhileItRuns(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	reported := func() string {
		info, err := s.Client().Info(ctx, "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	if pid := s.Pid(); pid == 0 || !strings.Contains(reported(), "process_id:"+strconv.Itoa(pid)+"\r\n") {
		t.Fatalf("Pid() = %d, not the server's own", pid)
	}
	before := s.Pid()
	s.Restart()
	if pid := s.Pid(); pid == before || !strings.Contains(reported(), "process_id:"+strconv.Itoa(pid)+"\r\n") {
		t.Fatalf("Pid() = %d after a restart (before: %d), not the server's own", pid, before)
	}
	s.Kill()
	if pid := s.Pid(); pid != 0 {
		t.Fatalf("Pid() = %d once killed, want 0", pid)
	}
}

// DLOCK_REDIS_SERVER is a command prefix: here env(1) before the server.
func TestStart_ServerEnvIsACommandPrefix(t *testing.T) {
	bin, err := serverCommand()
	if err != nil {
		t.Skip(err)
	}
	t.Setenv(ServerEnv, "env "+strings.Join(bin, " "))
	s := Start(t)
	if err := s.Client().Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING through %q: %v", os.Getenv(ServerEnv), err)
	}
}
