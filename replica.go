package dlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// replicaAck is [WithReplicaAck]'s rule: how many replicas must confirm a
// write a lease counts on, and how long WAIT waits; n == 0: none.
type replicaAck struct {
	n       int
	timeout time.Duration
}

// send sends calls, all for keys of master, then WAIT, in one pipeline on
// one connection (WAIT confirms what its connection wrote). It returns nil
// when n replicas confirmed, else an error matching [ErrReplicaAck] (or
// [ErrPermission] without +wait).
func (ack replicaAck) send(ctx context.Context, fns *functions, master redis.UniversalClient, calls []scriptCall) error {
	all := append(slices.Clip(calls), scriptCall{argv: []any{"wait", ack.n, max(ack.timeout.Milliseconds(), 1)}})
	sendScripts(ctx, fns, master, all)
	copy(calls, all) // their replies
	acks := all[len(calls)].cmd
	got, err := acks.Int64()
	switch {
	case isPermission(acks.Err()):
		return fmt.Errorf("%w: WAIT: %w", ErrPermission, err)
	case acks.Err() != nil:
		return fmt.Errorf("%w: WAIT: %w", ErrReplicaAck, err)
	case err != nil || got < int64(ack.n):
		return fmt.Errorf("%w: %d of %d within %v", ErrReplicaAck, got, ack.n, ack.timeout)
	}
	return nil
}

// acquireAcknowledged runs an acquire command (argv) with WAIT after it on
// the master of its first key.
func (c *Client) acquireAcknowledged(ctx context.Context, ack replicaAck, script *redis.Script, argv []any) (*redis.Cmd, error) {
	master, err := c.masterFor(ctx, argv[3].(string))
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd, nil
	}
	return c.sendAcknowledged(ctx, ack, master, false, script, argv)
}

// sendAcknowledged runs one script's command with WAIT after it on master,
// following a cluster's MOVED and ASK (asking: after an ASK), and returns
// a shortfall of acknowledgements as an error matching [ErrReplicaAck],
// for the caller to judge once it knows the script wrote something. WAIT
// confirms only its own connection's writes, so both go in one pipeline
// on the node's client; go-redis's cluster client would route the keyless
// WAIT apart and resend a redirected command alone, so redirections are
// followed here.
func (c *Client) sendAcknowledged(ctx context.Context, ack replicaAck, master redis.UniversalClient, asking bool,
	script *redis.Script, argv []any) (*redis.Cmd, error) {
	for redirects := 0; ; redirects++ {
		var calls []scriptCall
		if asking { // an ASK redirection is followed with ASKING first
			calls = append(calls, scriptCall{argv: []any{"asking"}})
		}
		calls = append(calls, scriptCall{script: script, argv: argv})
		ackErr := ack.send(ctx, &c.fns, master, calls)
		cmd := calls[len(calls)-1].cmd
		if addr, ask, redirected := redirection(cmd.Err()); redirected && redirects < maxRedirects {
			if next, err := c.clusterNode(ctx, addr, !ask); err == nil {
				master, asking = next, ask
				continue
			}
		}
		if cmd.Err() != nil {
			return cmd, nil
		}
		return cmd, ackErr
	}
}

// maxRedirects bounds the MOVED and ASK answers sendAcknowledged
// follows, as go-redis's cluster client does by default.
const maxRedirects = 3

// masterFor is the client of the master that holds key: a cluster node, a
// Ring shard, else the Client's own.
func (c *Client) masterFor(ctx context.Context, key string) (redis.UniversalClient, error) {
	if nodes, routed := keyNodesOf(c.rdb); routed {
		return nodes.forKey(ctx, key)
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
// master or replica (one just promoted may not be known as master yet).
// moved: the layout changed, so the client reloads it.
func (c *Client) clusterNode(ctx context.Context, addr string, moved bool) (*redis.Client, error) {
	cluster, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return nil, fmt.Errorf("dlock: a redirection to %s from a server that is not a cluster's", addr)
	}
	if moved {
		cluster.ReloadState(ctx)
	}
	var found atomic.Pointer[redis.Client] // ForEachShard calls at once
	_ = cluster.ForEachShard(ctx, func(_ context.Context, node *redis.Client) error {
		if node.Options().Addr == addr {
			found.Store(node)
		}
		return nil
	})
	if found.Load() == nil {
		return nil, fmt.Errorf("dlock: a redirection to %s, a node the cluster client does not know yet", addr)
	}
	return found.Load(), nil
}
