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
// node of its choosing, so there the loads go to nodes first: on a
// cluster, to the masters of the calls' keys, and to every master only
// should a call meet NOSCRIPT again (its slot moving to a node without
// them), so that a stalled master delays no call on another (a renewal
// would wait for it past its lease's deadline); on a Ring, to every shard.
// A call whose script could not be loaded fails with the load's error (a
// NOPERM names the right the user lacks).
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
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		loadErr := loadForCalls(ctx, cluster, calls, load)
		if resendNoScript(ctx, rdb, nil, calls, loadErr) {
			// A call's slot moved to a node without the scripts: every master.
			resendNoScript(ctx, rdb, nil, calls, cluster.ForEachMaster(ctx, loader(load)))
		}
		return
	}
	var loadErr error
	if ring, ok := rdb.(*redis.Ring); ok {
		loadErr, load = ring.ForEachShard(ctx, loader(load)), nil
	}
	resendNoScript(ctx, rdb, load, calls, loadErr)
}

// resendNoScript sends the calls that met NOSCRIPT again, with the
// commands that frame them, after the SCRIPT LOADs of load; it reports
// whether one met NOSCRIPT again. A node down elsewhere in a cluster fails
// the loads but not the calls: they go again, and loadErr explains only
// those still NOSCRIPT.
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

// loadForCalls loads scripts on the master of each call that met NOSCRIPT
// (by its first key), once per master.
func loadForCalls(ctx context.Context, cluster *redis.ClusterClient, calls []scriptCall, scripts []string) error {
	done := map[string]bool{}
	for _, call := range calls {
		if call.script == nil || !isNoScript(call.cmd.Err()) || len(call.argv) < 4 {
			continue
		}
		key, _ := call.argv[3].(string) // after EVALSHA, the SHA and the number of keys
		master, err := cluster.MasterForKey(ctx, key)
		if err != nil {
			return err
		}
		if addr := master.Options().Addr; !done[addr] {
			done[addr] = true
			if err := loader(scripts)(ctx, master); err != nil {
				return err
			}
		}
	}
	return nil
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
