package dlock

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// acquireAcknowledged runs an acquire script's EVALSHA command (argv, as
// call.argv builds it) for [WithReplicaAck]: it sends WAIT after it in one
// pipeline on one connection to the master of its first key, and reports a
// shortfall of replica acknowledgements as an error matching
// [ErrReplicaAck], for the caller to check once it knows the script granted
// a hold (a refusal needs no replicas).
func (c *Client) acquireAcknowledged(ctx context.Context, cfg settings, script *redis.Script, argv []any) (*redis.Cmd, error) {
	master, err := c.masterFor(ctx, argv[3].(string))
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd, nil
	}
	var cmd, acks *redis.Cmd
	asking := false
	for redirects := 0; ; redirects++ {
		cmd, acks = acquireThenWait(ctx, master, cfg, script, argv, asking)
		// The pipeline goes to one node, not through the cluster client:
		// follow a failover's or a resharding's redirection here.
		addr, ask, redirected := redirection(cmd.Err())
		if !redirected || redirects == maxRedirects {
			break
		}
		next, err := c.clusterNode(ctx, addr, !ask)
		if err != nil {
			break
		}
		master, asking = next, ask
	}
	if cmd.Err() != nil {
		return cmd, nil
	}
	if err := acks.Err(); err != nil {
		if isPermission(err) { // a missing +wait is the operator's to fix, not a slow replica
			return cmd, fmt.Errorf("%w: WAIT: %w", ErrPermission, err)
		}
		return cmd, fmt.Errorf("%w: WAIT: %w", ErrReplicaAck, err)
	}
	if got, err := acks.Int64(); err != nil || got < int64(cfg.replicaAck) {
		return cmd, fmt.Errorf("%w: %d of %d within %v", ErrReplicaAck, got, cfg.replicaAck, cfg.replicaAckTimeout)
	}
	return cmd, nil
}

// maxRedirects bounds the MOVED and ASK answers acquireAcknowledged
// follows, as go-redis's cluster client does by default.
const maxRedirects = 3

// acquireThenWait pipelines the acquire script and WAIT to master; asking
// sends ASKING first, as an ASK redirection requires.
func acquireThenWait(ctx context.Context, master redis.UniversalClient, cfg settings, script *redis.Script, argv []any,
	asking bool) (cmd, acks *redis.Cmd) {
	calls := make([]scriptCall, 0, 3)
	if asking {
		calls = append(calls, scriptCall{argv: []any{"asking"}})
	}
	calls = append(calls, scriptCall{script: script, argv: argv},
		scriptCall{argv: []any{"wait", cfg.replicaAck, max(cfg.replicaAckTimeout.Milliseconds(), 1)}})
	sendScripts(ctx, master, calls)
	return calls[len(calls)-2].cmd, calls[len(calls)-1].cmd
}

// masterFor is the client of the master that holds key: on a cluster its
// node's, on a Ring the key's shard's, elsewhere the Client's own (a single
// server, or Sentinel's current master). WAIT goes to it, on the script's
// connection (WAIT names no key), and the renewer sends a batch to each.
func (c *Client) masterFor(ctx context.Context, key string) (redis.UniversalClient, error) {
	switch rdb := c.rdb.(type) {
	case *redis.ClusterClient:
		return rdb.MasterForKey(ctx, key)
	case *redis.Ring:
		return rdb.GetShardClientForKey(key)
	}
	return c.rdb, nil
}

// redirection reads a cluster node's MOVED or ASK answer: the address of
// the node that serves the key now (MOVED) or for this command (ASK).
func redirection(err error) (addr string, ask, ok bool) {
	if err == nil {
		return "", false, false
	}
	fields := strings.Fields(err.Error())
	if len(fields) != 3 || (fields[0] != "MOVED" && fields[0] != "ASK") {
		return "", false, false
	}
	return fields[2], fields[0] == "ASK", true
}

// clusterNode is the cluster client's connection to the node at addr,
// master or replica (a replica just promoted may not be known as a master
// yet). moved: the cluster's layout changed, so the client reloads it.
func (c *Client) clusterNode(ctx context.Context, addr string, moved bool) (*redis.Client, error) {
	cluster, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return nil, fmt.Errorf("dlock: a redirection to %s from a server that is not a cluster's", addr)
	}
	if moved {
		cluster.ReloadState(ctx)
	}
	var found *redis.Client
	var mu sync.Mutex
	_ = cluster.ForEachShard(ctx, func(_ context.Context, node *redis.Client) error {
		if node.Options().Addr == addr {
			mu.Lock()
			found = node
			mu.Unlock()
		}
		return nil
	})
	if found == nil {
		return nil, fmt.Errorf("dlock: a redirection to %s, a node the cluster client does not know yet", addr)
	}
	return found, nil
}
