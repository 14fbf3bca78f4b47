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

// SendWaited sends calls, all for keys of master, then WAIT for replicas
// within timeout, in one pipeline on one connection (WAIT confirms what
// its connection wrote). It returns WAIT's reply.
func SendWaited(ctx context.Context, fns *Functions, master redis.UniversalClient, calls []Call, replicas int, timeout time.Duration) *redis.Cmd {
	all := append(slices.Clip(calls), Call{Argv: []any{"wait", replicas, max(timeout.Milliseconds(), 1)}})
	Send(ctx, fns, master, all)
	copy(calls, all) // their replies
	return all[len(calls)].Cmd
}

// SendAcknowledged runs one script's command with WAIT after it on master,
// following the MOVED and ASK answers of rdb's cluster (asking: after an
// ASK). It returns the command's reply and, unless that is an error,
// WAIT's. WAIT confirms only its own connection's writes, so both go in
// one pipeline on the node's client; go-redis's cluster client would
// route the keyless WAIT apart and resend a redirected command alone, so
// redirections are followed here.
func SendAcknowledged(ctx context.Context, fns *Functions, rdb, master redis.UniversalClient, asking bool,
	replicas int, timeout time.Duration, script *redis.Script, argv []any) (cmd, acks *redis.Cmd) {
	for redirects := 0; ; redirects++ {
		var calls []Call
		if asking { // an ASK redirection is followed with ASKING first
			calls = append(calls, Call{Argv: []any{"asking"}})
		}
		calls = append(calls, Call{Script: script, Argv: argv})
		wait := SendWaited(ctx, fns, master, calls, replicas, timeout)
		reply := calls[len(calls)-1].Cmd
		if addr, ask, redirected := Redirection(reply.Err()); redirected && redirects < maxRedirects {
			if next, err := ClusterNode(ctx, rdb, addr, !ask); err == nil {
				master, asking = next, ask
				continue
			}
		}
		if reply.Err() != nil {
			return reply, nil
		}
		return reply, wait
	}
}

// maxRedirects bounds the MOVED and ASK answers SendAcknowledged
// follows, as go-redis's cluster client does by default.
const maxRedirects = 3

// Redirection reads a cluster node's MOVED or ASK answer: the address of
// the node that serves the key now (MOVED) or for this command (ASK).
func Redirection(err error) (addr string, ask, ok bool) {
	if err == nil {
		return "", false, false
	}
	fields := strings.Fields(err.Error())
	if len(fields) != 3 || (fields[0] != "MOVED" && fields[0] != "ASK") {
		return "", false, false
	}
	return fields[2], fields[0] == "ASK", true
}

// ClusterNode is rdb's connection to the node at addr, master or replica
// (one just promoted may not be known as master yet). moved: the layout
// changed, so the client reloads it.
func ClusterNode(ctx context.Context, rdb redis.UniversalClient, addr string, moved bool) (*redis.Client, error) {
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
