package redistest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ManualFailOver has master i's replica take its place with CLUSTER
// FAILOVER, mode "" (graceful, nothing lost), "FORCE" or "TAKEOVER". It
// returns once every node agrees and the old master is the new one's
// replica, in sync: the two swap places in Nodes and Replicas. A replica
// cut off by CutReplica gets its link back once promoted.
func (c *Cluster) ManualFailOver(ctx context.Context, i int, mode string) error {
	replica, old := c.Replicas[i], c.Nodes[i]
	args := []any{"CLUSTER", "FAILOVER"}
	if mode != "" {
		args = append(args, mode)
	}
	rdb := redis.NewClient(replica.options())
	defer rdb.Close()
	if err := rdb.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("redistest: CLUSTER FAILOVER %s on master %d's replica: %w", mode, i, err)
	}
	for {
		info, err := rdb.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "role:master") {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: no CLUSTER FAILOVER %s of master %d: %w", mode, i, ctx.Err())
		case <-time.After(10 * time.Millisecond): // the election runs on the nodes' own timers
		}
	}
	c.Nodes[i], c.Replicas[i] = replica, old
	if err := rdb.ConfigSet(ctx, "masteruser", "").Err(); err != nil {
		return fmt.Errorf("redistest: giving the promoted replica its link back: %w", err)
	}
	if err := rdb.ConfigSet(ctx, "masterauth", "").Err(); err != nil {
		return fmt.Errorf("redistest: giving the promoted replica its link back: %w", err)
	}
	return c.Settle(ctx)
}

// CutReplica cuts master i's replica off it, as a failed network would,
// until a ManualFailOver promotes it: it keeps what it had received and
// never gets what the master applies from now on.
func (c *Cluster) CutReplica(ctx context.Context, i int) error {
	rdb := redis.NewClient(c.Replicas[i].options())
	defer rdb.Close()
	for _, kv := range [][2]string{{"masteruser", "redistest-cut-off"}, {"masterauth", "cut-off"}} {
		if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			return fmt.Errorf("redistest: cutting replica %d off: %w", i, err)
		}
	}
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "master").Err(); err != nil {
		return fmt.Errorf("redistest: closing replica %d's link: %w", i, err)
	}
	return nil
}

// Settle returns once every node sees a healthy cluster of all nodes,
// every slot served and every replica in sync.
func (c *Cluster) Settle(ctx context.Context) error {
	clients := make([]*redis.Client, 0, 2*len(c.Nodes))
	for _, n := range append(append([]*Server(nil), c.Nodes...), c.Replicas...) {
		rdb := redis.NewClient(n.options())
		defer rdb.Close()
		clients = append(clients, rdb)
	}
	for !c.settled(ctx, clients) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: the cluster did not settle: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond): // the nodes gossip on their own
		}
	}
	return nil
}
