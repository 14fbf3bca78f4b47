package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of three masters, slots split evenly, and,
// when started by StartReplicatedCluster, a replica of each.
type Cluster struct {
	t        T
	Nodes    []*Server // the masters, in slot order
	Replicas []*Server // Replicas[i] replicates Nodes[i]; none for StartCluster
	busPorts []int
	args     []string // every node's extra configuration
}

// StartCluster starts a 3-master cluster and returns once every node reports
// cluster_state:ok and knows all the slots' owners. Extra arguments are
// every node's redis-server configuration (an ACL user, say), restarts
// included.
func StartCluster(t T, args ...string) *Cluster {
	t.Helper()
	c := &Cluster{t: t, args: args}
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for range ranges {
		c.Nodes = append(c.Nodes, c.startNode())
	}

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	clients := make([]*redis.Client, len(c.Nodes))
	for i, n := range c.Nodes {
		clients[i] = n.Client()
		if err := clients[i].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]).Err(); err != nil {
			t.Fatalf("redistest: assigning slots: %v", err)
		}
	}
	c.meet(ctx, clients[0], 1)
	c.waitSettled(ctx, clients)
	return c
}

// StartReplicatedCluster starts a 3-master cluster with one replica per
// master, and returns once every replica is in sync and every node sees
// the whole cluster. A master killed is replaced by its replica within a
// few node timeouts (cluster-node-timeout is 1 s). Every node syncs its
// replicas at once (syncAtOnce).
func StartReplicatedCluster(t T, args ...string) *Cluster {
	t.Helper()
	c := StartCluster(t, append(syncAtOnce(), args...)...)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for range c.Nodes {
		c.Replicas = append(c.Replicas, c.startNode())
	}
	clients := make([]*redis.Client, 0, 2*len(c.Nodes))
	for _, n := range append(append([]*Server(nil), c.Nodes...), c.Replicas...) {
		clients = append(clients, n.Client())
	}
	c.meet(ctx, clients[0], len(c.Nodes))
	for i, r := range c.Replicas {
		id, err := c.Nodes[i].Client().ClusterMyID(ctx).Result()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		for r.Client().Do(ctx, "CLUSTER", "REPLICATE", id).Err() != nil { // until the replica has heard of its master
			if ctx.Err() != nil {
				t.Fatalf("redistest: replica %d did not attach within %v", i, startTimeout)
			}
			time.Sleep(20 * time.Millisecond) // gossip; nothing to wait on but the answer
		}
	}
	c.waitSettled(ctx, clients)
	return c
}

// startNode starts one cluster-enabled server with no slots.
func (c *Cluster) startNode() *Server {
	c.t.Helper()
	port, err := freePort()
	if err != nil {
		c.t.Fatalf("redistest: finding a free port: %v", err)
	}
	c.busPorts = append(c.busPorts, port)
	return Start(c.t, append([]string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "1000",
		"--cluster-port", strconv.Itoa(port),
	}, c.args...)...)
}

// meet introduces every node from index from on to the cluster, through
// the first node.
func (c *Cluster) meet(ctx context.Context, first *redis.Client, from int) {
	all := append(append([]*Server(nil), c.Nodes...), c.Replicas...)
	for i := from; i < len(all); i++ {
		host, port := splitAddr(all[i].Addr())
		if err := first.Do(ctx, "CLUSTER", "MEET", host, port, c.busPorts[i]).Err(); err != nil {
			c.t.Fatalf("redistest: joining the cluster: %v", err)
		}
	}
}

func (c *Cluster) waitSettled(ctx context.Context, clients []*redis.Client) {
	for pause := 5 * time.Millisecond; !c.settled(ctx, clients); pause = min(pause*2, 100*time.Millisecond) {
		if ctx.Err() != nil {
			c.t.Fatalf("redistest: cluster did not settle within %v", startTimeout)
		}
		time.Sleep(pause) // the nodes gossip on their own; nothing to wait on but their answers
	}
}

// settled reports whether every node sees a healthy cluster of all nodes
// with every slot served (by a master, and a replica in sync where there
// are replicas).
func (c *Cluster) settled(ctx context.Context, clients []*redis.Client) bool {
	for _, rdb := range clients {
		info, err := rdb.ClusterInfo(ctx).Result()
		if err != nil ||
			!strings.Contains(info, "cluster_state:ok") ||
			!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(clients))) {
			return false
		}
		slots, err := rdb.ClusterSlots(ctx).Result()
		if err != nil || len(slots) != len(c.Nodes) {
			return false
		}
		for _, r := range slots {
			if len(r.Nodes) != 1+min(1, len(c.Replicas)) {
				return false
			}
		}
	}
	for _, r := range c.Replicas {
		info, err := r.Client().Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "master_link_status:up") {
			return false
		}
	}
	return true
}

// FailOver kills master i (SIGKILL) and returns once its replica serves
// its slots as the new master and every node agrees. The old master is
// then started again, empty, and rejoins as the new master's replica: the
// two swap places in Nodes and Replicas.
func (c *Cluster) FailOver(ctx context.Context, i int) error {
	replica, old := c.Replicas[i], c.Nodes[i]
	old.Kill()
	for {
		info, err := replica.Client().Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "role:master") {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: no failover of master %d: %w", i, ctx.Err())
		case <-time.After(50 * time.Millisecond): // the election runs on the nodes' own timers
		}
	}
	c.Nodes[i], c.Replicas[i] = replica, old
	old.mu.Lock()
	port := old.port
	old.mu.Unlock()
	if err := old.startOn(port); err != nil { // its nodes.conf makes it rejoin, as a replica
		return fmt.Errorf("redistest: restarting the old master: %w", err)
	}
	clients := make([]*redis.Client, 0, 2*len(c.Nodes))
	for _, n := range append(append([]*Server(nil), c.Nodes...), c.Replicas...) {
		clients = append(clients, n.Client())
	}
	for !c.settled(ctx, clients) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: cluster not settled after failing over master %d: %w", i, ctx.Err())
		case <-time.After(50 * time.Millisecond):
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

func splitAddr(addr string) (string, string) {
	i := strings.LastIndexByte(addr, ':')
	return addr[:i], addr[i+1:]
}
