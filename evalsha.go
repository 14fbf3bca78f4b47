package dlock

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/scripts"
)

// functions is what a Client (a Redlock's node) learnt of how its servers
// take dlock's scripts. They are sent as FCALL of dlock's function library
// (scripts.Library: its helpers defined once per server, not at every
// call) until a server refuses Redis Functions (Redis < 7, an ACL user
// without +fcall or +function|load, an embedded Redis without them); from
// then on, by EVALSHA, which every server takes.
type functions struct {
	refused atomic.Bool
}

// scriptCall is one command of what sendScripts sends: a script's FCALL
// (or EVALSHA) command or, with no script, a command that frames the
// scripts on their connection (ASKING before them, WAIT after them); and
// its reply.
type scriptCall struct {
	script *redis.Script
	argv   []any
	cmd    *redis.Cmd
}

// scriptArgv is the FCALL command of script on keys and args (EVALSHA for
// a script not in the library).
func scriptArgv(script *redis.Script, keys []string, args []any) []any {
	argv := make([]any, 0, 3+len(keys)+len(args))
	name, id := scriptHead(script)
	argv = append(argv, name, id, len(keys))
	for _, k := range keys {
		argv = append(argv, k)
	}
	return append(argv, args...)
}

// runScript runs script on rdb, as [redis.Script.Run] would but through
// sendScripts.
func runScript(ctx context.Context, fns *functions, rdb redis.UniversalClient, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	return sendScript(ctx, fns, rdb, script, scriptArgv(script, keys, args))
}

// sendScript is runScript with the command built, so that a hot path can
// keep what does not change (key names, TTLs) boxed once.
func sendScript(ctx context.Context, fns *functions, rdb redis.UniversalClient, script *redis.Script, argv []any) *redis.Cmd {
	calls := [1]scriptCall{{script: script, argv: argv}}
	sendScripts(ctx, fns, rdb, calls[:])
	return calls[0].cmd
}

// sendScripts sends calls to rdb: one alone, more in one pipeline. It is
// where dlock meets a server without its scripts (cold, flushed, restarted,
// a replica promoted before it had them): a call that met "Function not
// found" or NOSCRIPT goes again after the load, in the same pipeline on one
// server. A cluster or Ring routes loads as it likes, so there they go to
// the call's node first, and to every node only if the call misses again:
// a stalled node must not delay calls on the others. A call whose load
// failed fails with its error. Where Functions are refused, fns sends
// EVALSHA from then on, this call's again among them.
func sendScripts(ctx context.Context, fns *functions, rdb redis.UniversalClient, calls []scriptCall) {
	if fns.refused.Load() {
		asEvalsha(calls)
	}
	send(ctx, rdb, nil, calls)
	if slices.ContainsFunc(calls, refusedFunctions) { // maybe sent before another call learnt it
		fns.refused.Store(true)
		asEvalsha(calls) // the refused calls, and those that ran, whose replies stay
	}
	load := loadsFor(calls)
	if len(load) == 0 {
		return
	}
	defer func() {
		// A library that could not be loaded: the calls go again by
		// EVALSHA. From then on for a user without +function|load; this
		// once on a full server, which refuses FUNCTION LOAD but not
		// SCRIPT LOAD, so that a renewal or release still runs there.
		if slices.ContainsFunc(calls, func(call scriptCall) bool { return refusedFunctions(call) && call.argv[0] == "fcall" }) {
			fns.refused.Store(true)
			sendAgain(ctx, fns, rdb, calls, refusedFunctions)
		} else if slices.ContainsFunc(calls, fullForLibrary) {
			sendAgain(ctx, fns, rdb, calls, fullForLibrary)
		}
	}()
	nodes, routed := keyNodesOf(rdb)
	if !routed {
		resendNoScript(ctx, rdb, load, calls, nil)
		return
	}
	loadErr := nodes.loadForCalls(ctx, calls, load)
	// The calls still missing their script keep that error, to go again
	// below: a failed load on the node the map named may have been a load
	// on the wrong node.
	if !resendNoScript(ctx, rdb, nil, calls, nil) {
		return
	}
	nodes.loadEverywhere(ctx, rdb, calls, load, loadErr)
}

// sendAgain sends again by EVALSHA, with the commands that frame them, the
// calls that failed as failed says.
func sendAgain(ctx context.Context, fns *functions, rdb redis.UniversalClient, calls []scriptCall, failed func(scriptCall) bool) {
	var again []scriptCall
	var at []int
	for i, call := range calls {
		if call.script == nil || failed(call) {
			again, at = append(again, call), append(at, i)
		}
	}
	asEvalsha(again)
	sendScripts(ctx, fns, rdb, again)
	for j, i := range at {
		calls[i].cmd = again[j].cmd
	}
}

// asEvalsha makes the FCALLs of calls EVALSHA commands of their scripts.
func asEvalsha(calls []scriptCall) {
	for i, call := range calls {
		if call.script != nil && call.argv[0] == "fcall" {
			argv := slices.Clone(call.argv)
			argv[0], argv[1] = "evalsha", boxedHash(call.script)
			calls[i].argv = argv
		}
	}
}

// loadsFor are the commands that load what the calls that met a missing
// script miss: dlock's library for an FCALL, the scripts of its lock type
// for an EVALSHA.
func loadsFor(calls []scriptCall) [][]any {
	var library bool
	var sources []string
	for _, call := range calls {
		if !missingScript(call) {
			continue
		}
		if call.argv[0] == "fcall" {
			library = true
		} else {
			sources = append(sources, scripts.Companions(call.script)...)
		}
	}
	slices.Sort(sources) // two calls' types may be one
	var load [][]any
	if library {
		load = append(load, []any{"function", "load", scripts.Library})
	}
	for _, src := range slices.Compact(sources) {
		load = append(load, []any{"script", "load", src})
	}
	return load
}

// missingScript tells a call that met a server without its script, or
// whose Functions were refused (then sent as EVALSHA, asEvalsha).
func missingScript(call scriptCall) bool {
	return call.script != nil && call.cmd != nil && (isNoScript(call.cmd.Err()) || refusedFunctions(call))
}

// fullForLibrary tells an FCALL that failed as the load of its library
// did, on a full server (OOM).
func fullForLibrary(call scriptCall) bool {
	return call.script != nil && call.cmd != nil && call.argv[0] == "fcall" &&
		call.cmd.Err() != nil && strings.HasPrefix(call.cmd.Err().Error(), "OOM")
}

// refusedFunctions tells a call refused because the server does not take
// Redis Functions (see refusesFunctions).
func refusedFunctions(call scriptCall) bool {
	return call.script != nil && call.cmd != nil && refusesFunctions(call.cmd.Err())
}

// refusesFunctions tells the error of a server that does not take Redis
// Functions: FCALL or FUNCTION is an unknown command there, or the user
// may not run it.
func refusesFunctions(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "NOPERM") && !strings.Contains(msg, "unknown command") {
		return false
	}
	return strings.Contains(msg, "'fcall'") || strings.Contains(msg, "`fcall`") ||
		strings.Contains(msg, "'function") || strings.Contains(msg, "`function`")
}

// libraryLoaded tells FUNCTION LOAD's error where dlock's library is
// loaded already (by another client, meanwhile): no error. A function of
// one of its names in another library is one.
func libraryLoaded(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Library") && strings.Contains(msg, scripts.LibraryName) && strings.Contains(msg, "already exists")
}

// preload loads dlock's scripts on every server of rdb ahead of the calls
// that need them: the library, or where Functions are refused, the
// scripts of script's lock type.
func preload(ctx context.Context, fns *functions, rdb redis.UniversalClient, script *redis.Script) error {
	load := [][]any{{"function", "load", scripts.Library}}
	if fns.refused.Load() {
		load = load[:0]
		for _, src := range scripts.Companions(script) {
			load = append(load, []any{"script", "load", src})
		}
	}
	var err error
	if nodes, routed := keyNodesOf(rdb); routed {
		err = nodes.forEach(ctx, loader(load))
	} else {
		err = send(ctx, rdb, load, nil)
	}
	if !fns.refused.Load() && refusesFunctions(err) {
		fns.refused.Store(true)
		return preload(ctx, fns, rdb, script)
	}
	return err
}

// loadEverywhere loads scripts on every node at once and, as each load
// ends, sends the calls still NOSCRIPT again, until none is: a stalled
// node's load holds up no call that another node serves (a slot moved onto
// a master without the scripts, while the map still names the old one).
// A load still going when it returns goes on to its end, bounded by ctx
// and the node's timeouts. The calls still NOSCRIPT once every load ended
// get the first load's error (loadErr, the targeted load's, first).
func (nodes keyNodes) loadEverywhere(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall, load [][]any, loadErr error) {
	ended, all := make(chan error), make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		all <- nodes.forEach(ctx, func(ctx context.Context, node *redis.Client) error {
			err := loader(load)(ctx, node)
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
func resendNoScript(ctx context.Context, rdb redis.UniversalClient, load [][]any, calls []scriptCall, loadErr error) (again bool) {
	var resend []scriptCall
	var resent []int
	for i, call := range calls {
		if call.script == nil || missingScript(call) {
			resend, resent = append(resend, call), append(resent, i)
		}
	}
	if err := send(ctx, rdb, load, resend); loadErr == nil {
		loadErr = err
	}
	for j, i := range resent {
		calls[i].cmd = resend[j].cmd
		if missingScript(calls[i]) {
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
func (nodes keyNodes) loadForCalls(ctx context.Context, calls []scriptCall, load [][]any) error {
	var firstErr error
	done := map[string]bool{}
	for _, call := range calls {
		if !missingScript(call) || len(call.argv) < 4 || call.argv[2] == 0 {
			continue
		}
		key, _ := call.argv[3].(string) // after FCALL and the function (EVALSHA and the SHA), the number of keys
		node, err := nodes.forKey(ctx, key)
		if err == nil && !done[node.Options().Addr] {
			done[node.Options().Addr] = true
			err = loader(load)(ctx, node)
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// loader sends load to one node.
func loader(load [][]any) func(context.Context, *redis.Client) error {
	return func(ctx context.Context, node *redis.Client) error { return send(ctx, node, load, nil) }
}

// send sends the commands of load (FUNCTION LOAD, SCRIPT LOAD), then
// calls, on rdb: a call alone as a command, more as one pipeline. It
// returns the first load's error; a library loaded already is none.
func send(ctx context.Context, rdb redis.UniversalClient, load [][]any, calls []scriptCall) error {
	if len(load) == 0 && len(calls) == 1 {
		calls[0].cmd = rdb.Do(ctx, calls[0].argv...)
		return nil
	}
	pipe := rdb.Pipeline()
	loads := make([]*redis.Cmd, len(load))
	for i, argv := range load {
		loads[i] = pipe.Do(ctx, argv...)
	}
	for i := range calls {
		calls[i].cmd = pipe.Do(ctx, calls[i].argv...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	for _, cmd := range loads {
		if err := cmd.Err(); err != nil && !libraryLoaded(err) {
			return err
		}
	}
	return nil
}
