package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
// and the Sentinel sees it up.
func StartFailover(t T) *Failover {
	t.Helper()
	f := &Failover{Master: Start(t, replication...)}
	host, port, _ := net.SplitHostPort(f.Master.Addr())
	f.Replica = Start(t, append([]string{"--replicaof", host, port}, replication...)...)

	f.Sentinel = newServer(t)
	conf := filepath.Join(f.Sentinel.dir, "sentinel.conf")
	monitor := fmt.Sprintf("sentinel monitor %s %s %s 1\n"+
		"sentinel down-after-milliseconds %s 1000\n"+
		"sentinel failover-timeout %s 10000\n", MasterName, host, port, MasterName, MasterName)
	if err := os.WriteFile(conf, []byte(monitor), 0o600); err != nil {
		t.Fatalf("redistest: writing the sentinel's configuration: %v", err)
	}
	f.Sentinel.bin = append(f.Sentinel.bin, conf, "--sentinel")
	f.Sentinel.startFresh()

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := f.synced(ctx); err != nil {
		t.Fatalf("redistest: %v within %v", err, startTimeout)
	}
	return f
}

// replication configures a Failover's nodes, each master or replica in
// turn, a replica logging in as replicationUser, whom CutReplica turns off.
var replication = slices.Concat(syncAtOnce,
	[]string{"--masteruser", replicationUser, "--masterauth", replicationPassword},
	UserArgs(replicationUser, replicationPassword, []string{"+psync", "+replconf", "+ping"}))

const replicationUser, replicationPassword = "replication", "replication-secret"

// syncAtOnce has a master sync a new replica (at the start, or a failed-over
// master rejoining) at once, not after waiting 5 s for more (Redis 7's default).
var syncAtOnce = []string{"--repl-diskless-sync-delay", "0"}

// CutReplica cuts the replica off the master until the master dies, as a
// failed network would: the master closes its link and turns its
// replication user off. The replica keeps what it had, for the Sentinel to
// promote, and never gets what the master applies from now on.
func (f *Failover) CutReplica(ctx context.Context) error {
	master := f.Master.Client()
	if err := master.Do(ctx, "ACL", "SETUSER", replicationUser, "off").Err(); err != nil {
		return fmt.Errorf("turning the replication user off: %w", err)
	}
	if err := master.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		return fmt.Errorf("closing the replica's link: %w", err)
	}
	return nil
}

// Client returns a failover client, which follows the Sentinel to the
// current master; closed at the test's end.
func (f *Failover) Client() *redis.Client {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: []string{f.Sentinel.Addr()}})
	f.Master.t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// askSentinel asks ok, with a new client of the Sentinel, every pause
// until it holds or ctx ends. The client is closed then: one kept would stay
// open until the test's end (a soak starts a Failover a run).
func (f *Failover) askSentinel(ctx context.Context, pause time.Duration,
	ok func(*redis.SentinelClient) bool) error {
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: f.Sentinel.Addr()})
	defer sentinel.Close()
	return until(ctx, pause, func() bool { return ok(sentinel) })
}

// Promote has the Sentinel fail over to the replica, unless a failover it
// began on its own is under way, and returns once it names the replica
// master. While the Sentinel finds no replica to promote (NOGOODSLAVE: its
// last INFO of it too old, say), it asks again, as an operator would.
func (f *Failover) Promote(ctx context.Context) error {
	var err error
	waitErr := f.askSentinel(ctx, 100*time.Millisecond, func(sentinel *redis.SentinelClient) bool {
		err = sentinel.Failover(ctx, MasterName).Err() // again at the Sentinel's next look at the replica
		return err == nil || !strings.HasPrefix(err.Error(), "NOGOODSLAVE")
	})
	if err != nil && !strings.HasPrefix(err.Error(), "INPROG") {
		return fmt.Errorf("SENTINEL FAILOVER: %w", errors.Join(err, waitErr))
	}
	return f.AwaitPromotion(ctx)
}

// AwaitPromotion returns once the Sentinel names the replica master, by a
// failover it began on its own or was told to make.
func (f *Failover) AwaitPromotion(ctx context.Context) error {
	if err := f.askSentinel(ctx, 50*time.Millisecond, func(sentinel *redis.SentinelClient) bool {
		addr, err := sentinel.GetMasterAddrByName(ctx, MasterName).Result()
		return err == nil && len(addr) == 2 && addr[0]+":"+addr[1] == f.Replica.Addr()
	}); err != nil {
		return fmt.Errorf("the sentinel did not promote the replica: %w", err)
	}
	return nil
}

// Rejoin restarts the old master, killed and failed over from, on its port,
// empty, as the promoted one's replica with args as extra configuration
// (ACL users), swaps Master and Replica, and returns as StartFailover does.
func (f *Failover) Rejoin(ctx context.Context, args ...string) error {
	old, promoted := f.Master, f.Replica
	host, port, _ := net.SplitHostPort(promoted.Addr())
	old.args = append(append([]string{"--replicaof", host, port}, replication...), args...)
	if err := old.restart(); err != nil {
		return err
	}
	f.Master, f.Replica = promoted, old
	return f.synced(ctx)
}

// synced returns once the replica is in sync and the Sentinel sees it up.
func (f *Failover) synced(ctx context.Context) error {
	if err := f.askSentinel(ctx, 50*time.Millisecond, func(sentinel *redis.SentinelClient) bool {
		return f.Replica.replication(ctx, "master_link_status:up") &&
			sentinelSeesUp(ctx, sentinel, f.Replica.Addr()) && acknowledges(ctx, f.Master.Client())
	}); err != nil {
		return fmt.Errorf("the replica did not sync, or the sentinel did not see it up: %w", err)
	}
	return nil
}

// acknowledges reports whether master's replica acknowledges a write
// within 100 ms, as WithReplicaAck asks it to: on a loaded machine its
// "link up" (a sync at once, no delay) comes well before that.
func acknowledges(ctx context.Context, master *redis.Client) bool {
	if master.Set(ctx, "redistest:acknowledged", "1", time.Minute).Err() != nil {
		return false
	}
	n, err := master.Do(ctx, "WAIT", 1, 100).Int()
	return err == nil && n == 1
}

// sentinelSeesUp reports whether the Sentinel would promote the replica at
// addr now: up, reachable, with a recent answer to PING and INFO (its
// choice of a replica needs an INFO within 5 s when the master is down).
func sentinelSeesUp(ctx context.Context, sentinel *redis.SentinelClient, addr string) bool {
	replicas, err := sentinel.Replicas(ctx, MasterName).Result()
	if err != nil {
		return false
	}
	for _, r := range replicas {
		if r["ip"]+":"+r["port"] != addr {
			continue
		}
		recent := func(field string) bool {
			ms, err := strconv.Atoi(r[field])
			return err == nil && ms < 2000
		}
		return !strings.Contains(r["flags"], "down") && !strings.Contains(r["flags"], "disconnected") &&
			r["role-reported"] == "slave" && recent("info-refresh") && recent("last-ok-ping-reply")
	}
	return false
}
