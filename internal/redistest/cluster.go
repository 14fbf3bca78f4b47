package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of three masters, slots split evenly, and,
// when started by StartReplicatedCluster, a replica of each.
type Cluster struct {
	t        T
	Nodes    []*Server       // the masters, in slot order
	Replicas []*Server       // Replicas[i] replicates Nodes[i]; none for StartCluster
	busPorts map[*Server]int // each node's cluster bus port
	args     []string        // every node's extra configuration
}

// StartCluster starts a 3-master cluster and returns once it has settled.
// Extra arguments configure every node, restarts included (an ACL user).
func StartCluster(t T, args ...string) *Cluster {
	t.Helper()
	return startCluster(t, false, args)
}

// StartReplicatedCluster is StartCluster with one replica per master,
// synced at once (syncAtOnce). A master killed is replaced by its replica
// within a few node timeouts (cluster-node-timeout is 1 s).
func StartReplicatedCluster(t T, args ...string) *Cluster {
	t.Helper()
	return startCluster(t, true, slices.Concat(syncAtOnce, args))
}

func startCluster(t T, replicated bool, args []string) *Cluster {
	t.Helper()
	c := &Cluster{t: t, args: args, busPorts: map[*Server]int{}}
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for range ranges {
		c.Nodes = append(c.Nodes, c.startNode())
		if replicated {
			c.Replicas = append(c.Replicas, c.startNode())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for i, n := range c.Nodes {
		if err := n.Client().Do(ctx, "CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]).Err(); err != nil {
			t.Fatalf("redistest: assigning slots: %v", err)
		}
	}
	for _, n := range c.all()[1:] {
		host, port, _ := net.SplitHostPort(n.Addr())
		if err := c.Nodes[0].Client().Do(ctx, "CLUSTER", "MEET", host, port, c.busPorts[n]).Err(); err != nil {
			t.Fatalf("redistest: joining the cluster: %v", err)
		}
	}
	for i, r := range c.Replicas {
		id, err := c.Nodes[i].Client().ClusterMyID(ctx).Result()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		if until(ctx, 20*time.Millisecond, func() bool { // until the replica has heard of its master
			return r.Client().Do(ctx, "CLUSTER", "REPLICATE", id).Err() == nil
		}) != nil {
			t.Fatalf("redistest: replica %d did not attach within %v", i, startTimeout)
		}
	}
	if err := c.Settle(ctx); err != nil {
		t.Fatalf("%v within %v", err, startTimeout)
	}
	return c
}

// startNode starts one cluster-enabled server with no slots.
func (c *Cluster) startNode() *Server {
	c.t.Helper()
	port := freePort(c.t)
	n := Start(c.t, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "1000", "--cluster-port", strconv.Itoa(port)}, c.args...)...)
	c.busPorts[n] = port
	return n
}

// all are the masters, then the replicas.
func (c *Cluster) all() []*Server { return slices.Concat(c.Nodes, c.Replicas) }

// Settle returns once every node sees a healthy cluster of all nodes,
// every slot served and every replica in sync.
func (c *Cluster) Settle(ctx context.Context) error {
	if err := until(ctx, 20*time.Millisecond, func() bool { return c.settled(ctx) }); err != nil {
		return fmt.Errorf("redistest: the cluster did not settle: %w", err)
	}
	return nil
}

func (c *Cluster) settled(ctx context.Context) bool {
	all := c.all()
	for _, n := range all {
		info, err := n.Client().ClusterInfo(ctx).Result()
		if err != nil ||
			!strings.Contains(info, "cluster_state:ok") ||
			!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(all))) {
			return false
		}
		slots, err := n.Client().ClusterSlots(ctx).Result()
		if err != nil || len(slots) != len(c.Nodes) || slices.ContainsFunc(slots, func(r redis.ClusterSlot) bool {
			return len(r.Nodes) != 1+min(1, len(c.Replicas))
		}) {
			return false
		}
	}
	return !slices.ContainsFunc(c.Replicas, func(r *Server) bool { return !r.replication(ctx, "master_link_status:up") })
}

// FailOver kills master i (SIGKILL) and returns once its replica serves its
// slots and every node agrees. The old master restarts, empty, as the new
// one's replica: the two swap places in Nodes and Replicas.
func (c *Cluster) FailOver(ctx context.Context, i int) error {
	c.Nodes[i].Kill()
	if err := c.promoted(ctx, i, 50*time.Millisecond); err != nil { // the election runs on the nodes' own timers
		return fmt.Errorf("redistest: no failover of master %d: %w", i, err)
	}
	if err := c.Replicas[i].restart(); err != nil { // its nodes.conf makes it rejoin, as a replica
		return fmt.Errorf("redistest: the old master: %w", err)
	}
	return c.Settle(ctx)
}

// ManualFailOver has master i's replica take its place with CLUSTER
// FAILOVER, mode "" (graceful, nothing lost), "FORCE" or "TAKEOVER", and
// returns once the cluster has settled, the two swapped as by FailOver. A
// replica cut off by CutReplica gets its link back once promoted.
func (c *Cluster) ManualFailOver(ctx context.Context, i int, mode string) error {
	args := []any{"CLUSTER", "FAILOVER"}
	if mode != "" {
		args = append(args, mode)
	}
	rdb := c.Replicas[i].Client()
	if err := rdb.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("redistest: CLUSTER FAILOVER %s on master %d's replica: %w", mode, i, err)
	}
	if err := c.promoted(ctx, i, 10*time.Millisecond); err != nil {
		return fmt.Errorf("redistest: no CLUSTER FAILOVER %s of master %d: %w", mode, i, err)
	}
	if err := rdb.Do(ctx, "CONFIG", "SET", "masteruser", "", "masterauth", "").Err(); err != nil {
		return fmt.Errorf("redistest: giving the promoted replica its link back: %w", err)
	}
	return c.Settle(ctx)
}

// promoted returns once master i's replica is a master, swapping the two.
func (c *Cluster) promoted(ctx context.Context, i int, pause time.Duration) error {
	if err := until(ctx, pause, func() bool { return c.Replicas[i].replication(ctx, "role:master") }); err != nil {
		return err
	}
	c.Nodes[i], c.Replicas[i] = c.Replicas[i], c.Nodes[i]
	return nil
}

// CutReplica cuts master i's replica off it, as a failed network would,
// until a ManualFailOver promotes it: it keeps what it had received and
// never gets what the master applies from now on.
func (c *Cluster) CutReplica(ctx context.Context, i int) error {
	rdb := c.Replicas[i].Client()
	if err := rdb.Do(ctx, "CONFIG", "SET", "masteruser", "redistest-cut-off", "masterauth", "cut-off").Err(); err != nil {
		return fmt.Errorf("redistest: cutting replica %d off: %w", i, err)
	}
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "master").Err(); err != nil {
		return fmt.Errorf("redistest: closing replica %d's link: %w", i, err)
	}
	return nil
}

// SlotOwner returns the index in Nodes of the master serving slot.
func (c *Cluster) SlotOwner(ctx context.Context, slot int) (int, error) {
	slots, err := c.Nodes[0].Client().ClusterSlots(ctx).Result()
	if err != nil {
		return 0, err
	}
	for _, r := range slots {
		if int(r.Start) <= slot && slot <= int(r.End) && len(r.Nodes) > 0 {
			if i := slices.IndexFunc(c.Nodes, func(n *Server) bool { return n.Addr() == r.Nodes[0].Addr }); i >= 0 {
				return i, nil
			}
		}
	}
	return 0, fmt.Errorf("redistest: no node serves slot %d", slot)
}

// MigrateSlot moves slot, with its keys, to node to, as redis-cli --cluster
// reshard does: keys move in batches (meanwhile clients get ASK, or TRYAGAIN
// for keys split), then every node is told the new owner. between, when
// set, runs after the first batch: while the slot is split.
func (c *Cluster) MigrateSlot(ctx context.Context, slot, to int, between func()) error {
	from, err := c.SlotOwner(ctx, slot)
	if err != nil || from == to {
		return err
	}
	src, dst := c.Nodes[from].Client(), c.Nodes[to].Client()
	srcID, srcErr := src.ClusterMyID(ctx).Result()
	dstID, dstErr := dst.ClusterMyID(ctx).Result()
	if err := errors.Join(srcErr, dstErr); err != nil {
		return err
	}
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		return fmt.Errorf("redistest: importing slot %d: %w", slot, err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		return fmt.Errorf("redistest: migrating slot %d: %w", slot, err)
	}
	host, port, _ := net.SplitHostPort(c.Nodes[to].Addr())
	for batch := 0; ; batch++ {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 2).Result()
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil && !strings.Contains(err.Error(), "NOKEY") {
			return fmt.Errorf("redistest: moving keys of slot %d: %w", slot, err)
		}
		if batch == 0 && between != nil {
			between()
		}
	}
	others := slices.DeleteFunc(slices.Clone(c.Nodes), func(n *Server) bool { return n == c.Nodes[from] || n == c.Nodes[to] })
	for _, n := range append([]*Server{c.Nodes[to], c.Nodes[from]}, others...) {
		if err := n.Client().Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err(); err != nil {
			return fmt.Errorf("redistest: assigning slot %d: %w", slot, err)
		}
	}
	return nil
}

// Addrs returns every node's address.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Client returns a cluster client, closed at the test's end.
func (c *Cluster) Client() *redis.ClusterClient {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	c.t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
