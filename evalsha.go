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
// node of its choosing, so there the loads go to every node first. A call
// whose script could not be loaded fails with the load's error (a NOPERM
// names the right the user lacks).
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
	var again []scriptCall
	var resent []int
	for i, call := range calls {
		if call.script == nil || isNoScript(call.cmd.Err()) {
			again, resent = append(again, call), append(resent, i)
		}
	}
	loaded, loadErr := loadOnEveryNode(ctx, rdb, load)
	if loaded {
		load = nil
	}
	// A node down elsewhere in a cluster fails the loads but not the calls:
	// they go again, and the error explains only those still NOSCRIPT.
	if err := send(ctx, rdb, load, again); loadErr == nil {
		loadErr = err
	}
	for j, i := range resent {
		calls[i].cmd = again[j].cmd
		if loadErr != nil && calls[i].script != nil && isNoScript(calls[i].cmd.Err()) {
			calls[i].cmd.SetErr(loadErr)
		}
	}
}

// loadOnEveryNode loads scripts on every node of a cluster or a Ring, which
// would route a SCRIPT LOAD to a node of its choosing, and reports whether
// it did; a client of one server is left to send them ahead of the calls.
func loadOnEveryNode(ctx context.Context, rdb redis.UniversalClient, scripts []string) (loaded bool, err error) {
	load := func(ctx context.Context, node *redis.Client) error { return send(ctx, node, scripts, nil) }
	switch nodes := rdb.(type) {
	case *redis.ClusterClient:
		return true, nodes.ForEachShard(ctx, load)
	case *redis.Ring:
		return true, nodes.ForEachShard(ctx, load)
	}
	return false, nil
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
