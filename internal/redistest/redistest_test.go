package redistest

import (
	"context"
	"sync/atomic"
	"testing"

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
