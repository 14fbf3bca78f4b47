package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name a Failover's Sentinel knows its master by.
const MasterName = "dlock-test"

// Failover is a master, one replica of it, and a Sentinel watching them
// that promotes the replica when told to or when the master is down.
type Failover struct {
	Master, Replica, Sentinel *Server
}

// StartFailover starts the three and returns once the replica is in sync
// and the Sentinel knows it.
func StartFailover(t T) *Failover {
	t.Helper()
	f := &Failover{Master: Start(t)}
	host, port := splitAddr(f.Master.Addr())
	f.Replica = Start(t, "--replicaof", host, port)

	f.Sentinel = newServer(t)
	f.Sentinel.conf = filepath.Join(f.Sentinel.dir, "sentinel.conf")
	conf := fmt.Sprintf("sentinel monitor %s %s %s 1\n"+
		"sentinel down-after-milliseconds %s 1000\n"+
		"sentinel failover-timeout %s 10000\n", MasterName, host, port, MasterName, MasterName)
	if err := os.WriteFile(f.Sentinel.conf, []byte(conf), 0o600); err != nil {
		t.Fatalf("redistest: writing the sentinel's configuration: %v", err)
	}
	f.Sentinel.startFresh()

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	replica := f.Replica.Client()
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: f.Sentinel.Addr()})
	defer sentinel.Close()
	for {
		info, _ := replica.Info(ctx, "replication").Result()
		replicas, _ := sentinel.Replicas(ctx, MasterName).Result()
		if strings.Contains(info, "master_link_status:up") && len(replicas) == 1 {
			return f
		}
		select {
		case <-ctx.Done():
			t.Fatalf("redistest: the replica did not sync, or the sentinel did not find it, within %v", startTimeout)
		case <-time.After(50 * time.Millisecond): // external processes: nothing to wait on but asking
		}
	}
}

// Client returns a failover client, which follows the Sentinel to the
// current master; closed at the test's end.
func (f *Failover) Client() *redis.Client {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: []string{f.Sentinel.Addr()}})
	f.Master.t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Promote has the Sentinel fail over to the replica and returns once the
// Sentinel names it master.
func (f *Failover) Promote(ctx context.Context) error {
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: f.Sentinel.Addr()})
	defer sentinel.Close()
	if err := sentinel.Failover(ctx, MasterName).Err(); err != nil {
		return fmt.Errorf("SENTINEL FAILOVER: %w", err)
	}
	want := f.Replica.Addr()
	for {
		addr, err := sentinel.GetMasterAddrByName(ctx, MasterName).Result()
		if err == nil && len(addr) == 2 && addr[0]+":"+addr[1] == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the sentinel did not promote the replica: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
