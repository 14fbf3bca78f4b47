//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// TestExplore_ClusterLinksGoThroughTheirProxies: in a cluster run with
// network faults, a process's ClusterClient reaches every node through
// that node's proxy (its Dialer picks the proxy by the address the
// cluster names), so a toxic on one node's link stops that node's
// commands and no other's, and no dial goes around a proxy.
func TestExplore_ClusterLinksGoThroughTheirProxies(t *testing.T) {
	c := redistest.StartCluster(t, clusterUser()...)
	env := &exploreEnv{nodes: c.Nodes, cluster: true}
	n := startNetwork(env, &schedule{params: params{Seed: 1, Clients: 1, Faults: []string{"network"}}, process: []int{0}})
	defer n.stop()
	rdb := n.env(env, 0).newRedis()
	defer rdb.Close()
	ctx := ctxFor(t, time.Minute)

	// A key of the explorer's on each node.
	keyOn := make([]string, len(c.Nodes))
	for i, found := 0, 0; found < len(c.Nodes); i++ {
		key := fmt.Sprintf("{x1:k%d}", i)
		slot, err := c.Nodes[0].Client().ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if node := nodeOfSlot(int(slot)); keyOn[node] == "" {
			keyOn[node] = key
			found++
		}
	}
	set := func(key string) error {
		sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		return rdb.Set(sctx, "dlock:"+key, "v", time.Minute).Err()
	}
	for _, key := range keyOn {
		if err := set(key); err != nil {
			t.Fatalf("setting %s with no toxic on: %v", key, err)
		}
	}
	if n.strays.Load() != 0 || n.dials.Load() < int64(len(c.Nodes)) {
		t.Fatalf("%d dials around a proxy, %d through one; want none around, one a node at least", n.strays.Load(), n.dials.Load())
	}

	// Nothing through node 1's link: its key's commands time out, the
	// others' go on.
	body, _ := json.Marshal(dropped("downstream"))
	if _, err := n.proxies[0][1].Toxics.AddToxicJson(strings.NewReader(string(body))); err != nil {
		t.Fatal(err)
	}
	for i, key := range keyOn {
		err := set(key)
		if i == 1 && err == nil {
			t.Errorf("node 1's key was set through a link that lets nothing through")
		}
		if i != 1 && err != nil {
			t.Errorf("node %d's key, with a toxic on node 1's link only: %v", i, err)
		}
	}
	if err := n.proxies[0][1].Toxics.RemoveToxic(ctx, "timeout-downstream"); err != nil {
		t.Fatal(err)
	}
	if n.strays.Load() != 0 {
		t.Errorf("%d dials went around a proxy", n.strays.Load())
	}
}
