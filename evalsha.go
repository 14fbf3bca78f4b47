package dlock

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/scripts"
)

// scriptCall is one command of what sendScripts sends: a script's EVALSHA
// command or, with no script, a command that frames the scripts on their
// connection (ASKING before them, WAIT after them); and its reply.
type scriptCall struct {
	script *redis.Script
	argv   []any
	cmd    *redis.Cmd
}

// evalshaArgv is the EVALSHA command of script on keys and args.
func evalshaArgv(script *redis.Script, keys []string, args []any) []any {
	argv := make([]any, 0, 3+len(keys)+len(args))
	argv = append(argv, "evalsha", boxedHash(script), len(keys))
	for _, k := range keys {
		argv = append(argv, k)
	}
	return append(argv, args...)
}

// runScript runs script on rdb, as [redis.Script.Run] would but through
// sendScripts.
func runScript(ctx context.Context, rdb redis.UniversalClient, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	return sendScript(ctx, rdb, script, evalshaArgv(script, keys, args))
}

// sendScript is runScript with the EVALSHA command built, so that a hot
// path can keep what does not change (key names, TTLs) boxed once.
func sendScript(ctx context.Context, rdb redis.UniversalClient, script *redis.Script, argv []any) *redis.Cmd {
	calls := [1]scriptCall{{script: script, argv: argv}}
	sendScripts(ctx, rdb, calls[:])
	return calls[0].cmd
}

// sendScripts sends calls to rdb by SHA: one alone, more in one pipeline.
// It is the one place where dlock meets a server that does not know a
// script (NOSCRIPT: a cold, restarted or flushed server, or a replica
// promoted before it ever ran it): it loads the scripts that met NOSCRIPT
// with their companions (every script of their lock type, see
// scripts.Companions), so that the type's next calls find theirs, and sends
// those calls again with the commands that frame them. On one server the
// loads go in the same pipeline, ahead of the calls: one round trip more
// for the whole lock type. A cluster or a Ring routes a SCRIPT LOAD to a
// node of its choosing, so there the loads go to nodes first: to the node
// of each call's key (a cluster's master, a Ring's shard), and to every
// node only should a call meet NOSCRIPT again (the client's map of the
// nodes was stale: a slot moved, a shard came or went), so that a stalled
// node delays no call on another (a renewal would wait for it past its
// lease's deadline). A call whose script could not be loaded fails with the
// load's error (a NOPERM names the right the user lacks).
func sendScripts(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall) {
	send(ctx, rdb, nil, calls)
	var load []string // the scripts' sources
	for _, call := range calls {
		if call.script != nil && isNoScript(call.cmd.Err()) {
			load = append(load, scripts.Companions(call.script)...)
		}
	}
	if len(load) == 0 {
		return
	}
	slices.Sort(load) // two calls' types may be one
	load = slices.Compact(load)
	nodes, routed := keyNodesOf(rdb)
	if !routed {
		resendNoScript(ctx, rdb, load, calls, nil)
		return
	}
	loadErr := nodes.loadForCalls(ctx, calls, load)
	// The calls still NOSCRIPT keep that error, to go again below: a failed
	// load on the node the map named may have been a load on the wrong node.
	if !resendNoScript(ctx, rdb, nil, calls, nil) {
		return
	}
	nodes.loadEverywhere(ctx, rdb, calls, load, loadErr)
}

// loadEverywhere loads scripts on every node at once and, as each load
// ends, sends the calls still NOSCRIPT again, until none is: a stalled
// node's load holds up no call that another node serves (a slot moved onto
// a master without the scripts, while the map still names the old one).
// A load still going when it returns goes on to its end, bounded by ctx
// and the node's timeouts. The calls still NOSCRIPT once every load ended
// get the first load's error (loadErr, the targeted load's, first).
func (nodes keyNodes) loadEverywhere(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall, scripts []string, loadErr error) {
	ended, all := make(chan error), make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		all <- nodes.forEach(ctx, func(ctx context.Context, node *redis.Client) error {
			err := loader(scripts)(ctx, node)
			select {
			case ended <- err:
			case <-stop:
			}
			return err
		})
	}()
	for {
		select {
		case err := <-ended:
			if loadErr == nil {
				loadErr = err
			}
			if !resendNoScript(ctx, rdb, nil, calls, nil) {
				return
			}
		case err := <-all: // every load ended, and was received above
			if loadErr == nil {
				loadErr = err
			}
			resendNoScript(ctx, rdb, nil, calls, loadErr)
			return
		}
	}
}

// resendNoScript sends the calls that met NOSCRIPT again, with the
// commands that frame them, after the SCRIPT LOADs of load; it reports
// whether one met NOSCRIPT again, and gives those loadErr (if any) as their
// error. A node down elsewhere in a cluster fails the loads but not the
// calls: they go again, and loadErr explains only those still NOSCRIPT.
func resendNoScript(ctx context.Context, rdb redis.UniversalClient, load []string, calls []scriptCall, loadErr error) (again bool) {
	var resend []scriptCall
	var resent []int
	for i, call := range calls {
		if call.script == nil || isNoScript(call.cmd.Err()) {
			resend, resent = append(resend, call), append(resent, i)
		}
	}
	if err := send(ctx, rdb, load, resend); loadErr == nil {
		loadErr = err
	}
	for j, i := range resent {
		calls[i].cmd = resend[j].cmd
		if calls[i].script != nil && isNoScript(calls[i].cmd.Err()) {
			again = true
			if loadErr != nil {
				calls[i].cmd.SetErr(loadErr)
			}
		}
	}
	return again
}

// keyNodes reaches the nodes of a client that routes each command by its
// first key (a cluster, a Ring): the node that serves a key, by the
// client's map as it is now, and every node (a cluster's masters, a Ring's
// live shards).
type keyNodes struct {
	forKey  func(ctx context.Context, key string) (*redis.Client, error)
	forEach func(ctx context.Context, fn func(context.Context, *redis.Client) error) error
}

// keyNodesOf is rdb's keyNodes; routed is false for a client of one
// server (a plain or a Sentinel's), which sends everything on one
// connection.
func keyNodesOf(rdb redis.UniversalClient) (nodes keyNodes, routed bool) {
	switch rdb := rdb.(type) {
	case *redis.ClusterClient:
		return keyNodes{rdb.MasterForKey, rdb.ForEachMaster}, true
	case *redis.Ring:
		shardFor := func(_ context.Context, key string) (*redis.Client, error) { return rdb.GetShardClientForKey(key) }
		return keyNodes{shardFor, rdb.ForEachShard}, true
	}
	return keyNodes{}, false
}

// loadForCalls loads scripts on the node of each call that met NOSCRIPT
// (by its first key), once per node, and returns the first load's error:
// a node that fails its load keeps none of the others from theirs.
func (nodes keyNodes) loadForCalls(ctx context.Context, calls []scriptCall, scripts []string) error {
	var firstErr error
	done := map[string]bool{}
	for _, call := range calls {
		if call.script == nil || !isNoScript(call.cmd.Err()) || len(call.argv) < 4 || call.argv[2] == 0 {
			continue
		}
		key, _ := call.argv[3].(string) // after EVALSHA, the SHA and the number of keys
		node, err := nodes.forKey(ctx, key)
		if err == nil && !done[node.Options().Addr] {
			done[node.Options().Addr] = true
			err = loader(scripts)(ctx, node)
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// loader loads scripts on one node.
func loader(scripts []string) func(context.Context, *redis.Client) error {
	return func(ctx context.Context, node *redis.Client) error { return send(ctx, node, scripts, nil) }
}

// send sends SCRIPT LOAD of each of load, then calls, on rdb: a call alone
// as a command, more as one pipeline. It returns the first load's error.
func send(ctx context.Context, rdb redis.UniversalClient, load []string, calls []scriptCall) error {
	if len(load) == 0 && len(calls) == 1 {
		calls[0].cmd = rdb.Do(ctx, calls[0].argv...)
		return nil
	}
	pipe := rdb.Pipeline()
	loads := make([]*redis.StringCmd, len(load))
	for i, src := range load {
		loads[i] = pipe.ScriptLoad(ctx, src)
	}
	for i := range calls {
		calls[i].cmd = pipe.Do(ctx, calls[i].argv...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	for _, cmd := range loads {
		if err := cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}
