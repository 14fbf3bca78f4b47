package fcall

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// SendAcknowledged sends calls for keys of one master to the first call's
// key's master. WAIT for replicas follows them in one pipeline on one
// connection, as WAIT confirms only its connection's writes. A call
// redirected (MOVED, ASK) goes again, alone with its own WAIT, up to
// maxRedirects times: go-redis's cluster client would route WAIT apart.
// It returns the WAIT reply that counts for each call, nil if it failed.
func SendAcknowledged(ctx context.Context, fns *Functions, rdb redis.UniversalClient, calls []Call, replicas int, timeout time.Duration) []*redis.Cmd {
	acks := make([]*redis.Cmd, len(calls))
	key, _ := firstKey(calls[0].Argv)
	master, err := MasterFor(ctx, rdb, key)
	if err != nil {
		for i := range calls {
			calls[i].Cmd = redis.NewCmd(ctx)
			calls[i].Cmd.SetErr(err)
		}
		return acks
	}
	wait := Call{Argv: []any{"wait", replicas, max(timeout.Milliseconds(), 1)}}
	sent := append(slices.Clip(calls), wait)
	Send(ctx, fns, master, sent)
	for i := range calls {
		calls[i], acks[i] = sent[i], sent[len(calls)].Cmd
		for redirects := 0; redirects < maxRedirects; redirects++ {
			addr, ask, redirected := redirection(calls[i].Cmd.Err())
			if !redirected {
				break
			}
			next, err := clusterNode(ctx, rdb, addr, !ask)
			if err != nil {
				break
			}
			again := []Call{{Argv: []any{"asking"}}, calls[i], wait}
			if !ask { // ASKING goes first only after an ASK
				again = again[1:]
			}
			Send(ctx, fns, next, again)
			calls[i], acks[i] = again[len(again)-2], again[len(again)-1].Cmd
		}
		if calls[i].Cmd.Err() != nil {
			acks[i] = nil
		}
	}
	return acks
}

// maxRedirects bounds the MOVED and ASK answers SendAcknowledged follows
// for a call, as go-redis's cluster client does by default.
const maxRedirects = 3

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

// clusterNode is rdb's connection to the node at addr, master or replica
// (one just promoted may not be known as master yet). moved: the layout
// changed, so the client reloads it.
func clusterNode(ctx context.Context, rdb redis.UniversalClient, addr string, moved bool) (*redis.Client, error) {
	cluster, ok := rdb.(*redis.ClusterClient)
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
