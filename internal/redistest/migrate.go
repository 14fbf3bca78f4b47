package redistest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
)

// SlotOwner returns the index in Nodes of the master serving slot.
func (c *Cluster) SlotOwner(ctx context.Context, slot int) (int, error) {
	slots, err := c.Nodes[0].Client().ClusterSlots(ctx).Result()
	if err != nil {
		return 0, err
	}
	for _, r := range slots {
		if int(r.Start) <= slot && slot <= int(r.End) && len(r.Nodes) > 0 {
			for i, n := range c.Nodes {
				if n.Addr() == r.Nodes[0].Addr {
					return i, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("redistest: no node serves slot %d", slot)
}

// MigrateSlot moves slot, with its keys, to node to, the way
// redis-cli --cluster reshard does: the target imports, the owner
// migrates, keys move in batches (clients meanwhile get ASK redirections,
// or TRYAGAIN for commands whose keys are split), then every node is told
// the new owner. between, when set, runs after the first batch has moved:
// the moment a slot is split between two nodes.
func (c *Cluster) MigrateSlot(ctx context.Context, slot, to int, between func()) error {
	from, err := c.SlotOwner(ctx, slot)
	if err != nil || from == to {
		return err
	}
	src, dst := c.Nodes[from].Client(), c.Nodes[to].Client()
	srcID, err := src.ClusterMyID(ctx).Result()
	if err != nil {
		return err
	}
	dstID, err := dst.ClusterMyID(ctx).Result()
	if err != nil {
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
