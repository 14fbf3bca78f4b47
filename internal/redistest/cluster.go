package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of three masters, no replicas, slots split evenly.
type Cluster struct {
	t     T
	Nodes []*Server
}

// StartCluster starts a 3-master cluster and returns once every node reports
// cluster_state:ok and knows all the slots' owners.
func StartCluster(t T) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	busPorts := make([]int, len(ranges))
	for i := range ranges {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: finding a free port: %v", err)
		}
		busPorts[i] = port
		c.Nodes = append(c.Nodes, Start(t,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
			"--cluster-port", strconv.Itoa(port),
		))
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
	for i, n := range c.Nodes[1:] {
		host, port := splitAddr(n.Addr())
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", host, port, busPorts[i+1]).Err(); err != nil {
			t.Fatalf("redistest: joining the cluster: %v", err)
		}
	}
	for pause := 5 * time.Millisecond; !c.settled(ctx, clients); pause = min(pause*2, 100*time.Millisecond) {
		if ctx.Err() != nil {
			t.Fatalf("redistest: cluster did not settle within %v", startTimeout)
		}
		time.Sleep(pause) // the nodes gossip on their own; nothing to wait on but their answers
	}
	return c
}

// settled reports whether every node sees a healthy cluster of all nodes
// with every slot served.
func (c *Cluster) settled(ctx context.Context, clients []*redis.Client) bool {
	for _, rdb := range clients {
		info, err := rdb.ClusterInfo(ctx).Result()
		if err != nil ||
			!strings.Contains(info, "cluster_state:ok") ||
			!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(clients))) {
			return false
		}
		slots, err := rdb.ClusterSlots(ctx).Result()
		if err != nil || len(slots) != len(clients) {
			return false
		}
	}
	return true
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
