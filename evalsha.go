package dlock

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/scripts"
)

// functions is what a Client (a Redlock's node) learnt of its servers:
// scripts go as FCALL of dlock's function library until a server refuses
// Functions (Redis < 7, an ACL without them), then by EVALSHA.
type functions struct{ refused atomic.Bool }

// scriptCall is one command sendScripts sends, and its reply: a script's
// FCALL (or EVALSHA) or, without script, ASKING before or WAIT after.
type scriptCall struct {
	script *redis.Script
	argv   []any
	cmd    *redis.Cmd
}

// scriptArgv is the FCALL (EVALSHA, for a script not in the library) of
// script on keys and args.
func scriptArgv[A scripts.Args](script *redis.Script, keys []string, args A) []any {
	return args.Append(commandOn(script, nil, keys, 0))
}

// argRoom is what commandOn leaves for a script's ARGV: the most any
// takes but for a MultiLock's release (which grows its command).
const argRoom = 7

// commandOn starts script's command: its KEYS, boxed and then keys, more
// of them following; then its ARGV may be appended.
func commandOn(script *redis.Script, boxed []any, keys []string, more int) []any {
	argv := make([]any, 0, 3+len(boxed)+len(keys)+more+argRoom)
	name, id := scriptHead(script)
	argv = append(append(argv, name, id, len(boxed)+len(keys)+more), boxed...)
	for _, k := range keys {
		argv = append(argv, k)
	}
	return argv
}

// runScript runs script on rdb, as [redis.Script.Run] would but through
// sendScripts.
func runScript[A scripts.Args](ctx context.Context, fns *functions, rdb redis.UniversalClient, script *redis.Script, keys []string, args A) *redis.Cmd {
	return sendScript(ctx, fns, rdb, script, scriptArgv(script, keys, args))
}

// sendScript is runScript with the command built, so that a hot path can
// keep what does not change (key names, TTLs) boxed once.
func sendScript(ctx context.Context, fns *functions, rdb redis.UniversalClient, script *redis.Script, argv []any) *redis.Cmd {
	calls := [1]scriptCall{{script: script, argv: argv}}
	sendScripts(ctx, fns, rdb, calls[:])
	return calls[0].cmd
}

// sendScripts sends calls to rdb: one alone, more in one pipeline. A call
// that met a server without its scripts goes again after the load, in one
// pipeline; on a cluster or Ring the load goes to the call's node first,
// and to every node only if the call misses again, so a stalled node
// delays no other. A call whose load failed fails with its error. Where
// Functions are refused, fns sends EVALSHA from then on.
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
	if nodes, routed := keyNodesOf(rdb); !routed {
		resendNoScript(ctx, rdb, load, calls, nil)
	} else if loadErr := nodes.loadForCalls(ctx, calls, load); resendNoScript(ctx, rdb, nil, calls, nil) {
		nodes.loadEverywhere(ctx, rdb, calls, load, loadErr) // the map named the wrong node
	}
	// A library that could not be loaded: the calls go again by EVALSHA,
	// for good without +function|load, once on a full server (OOM), so a
	// renewal or release still runs there.
	failed := fullForLibrary
	if slices.ContainsFunc(calls, func(call scriptCall) bool { return refusedFunctions(call) && call.argv[0] == "fcall" }) {
		fns.refused.Store(true)
		failed = refusedFunctions
	}
	if slices.ContainsFunc(calls, failed) {
		resendSome(calls, failed, func(again []scriptCall) {
			asEvalsha(again)
			sendScripts(ctx, fns, rdb, again)
		})
	}
}

// resendSome has send send the calls pick chooses, with the commands that
// frame them, copies their replies back, and returns their indexes.
func resendSome(calls []scriptCall, pick func(scriptCall) bool, send func([]scriptCall)) []int {
	var some []scriptCall
	var at []int
	for i, call := range calls {
		if call.script == nil || pick(call) {
			some, at = append(some, call), append(at, i)
		}
	}
	send(some)
	for j, i := range at {
		calls[i].cmd = some[j].cmd
	}
	return at
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

// loadsFor loads what the calls that met a missing script miss: the
// library for an FCALL, the scripts of its lock type for an EVALSHA.
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
	return loads(library, slices.Compact(sources))
}

// loads are the commands that load the library and sources.
func loads(library bool, sources []string) [][]any {
	var load [][]any
	if library {
		load = append(load, []any{"function", "load", scripts.Library})
	}
	for _, src := range sources {
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

// refusedFunctions tells a call refused by a server that does not take
// Redis Functions.
func refusedFunctions(call scriptCall) bool {
	return call.script != nil && call.cmd != nil && refusesFunctions(call.cmd.Err())
}

// refusesFunctions tells the error of a server that does not take Redis
// Functions: FCALL or FUNCTION is unknown there, or not permitted.
func refusesFunctions(err error) bool {
	return (errSays(err, "unknown command") || err != nil && strings.HasPrefix(err.Error(), "NOPERM")) &&
		errSays(err, "'fcall'", "`fcall`", "'function", "`function`")
}

// libraryLoaded tells FUNCTION LOAD's error where dlock's library is
// loaded already: no error.
func libraryLoaded(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Library") && strings.Contains(msg, scripts.LibraryName) && strings.Contains(msg, "already exists")
}

// loadEverywhere loads scripts on every node at once and, as each load
// ends, resends the calls still NOSCRIPT until none is: a stalled node
// holds up no call another serves (its load goes on, bounded by ctx).
// Calls still NOSCRIPT at the end get the first load's error.
func (nodes keyNodes) loadEverywhere(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall, load [][]any, loadErr error) {
	ended, all := make(chan error), make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		all <- nodes.forEach(ctx, func(ctx context.Context, node *redis.Client) error {
			err := send(ctx, node, load, nil)
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

// resendNoScript sends the calls that met NOSCRIPT again after load, and
// reports whether one met it again. Only those get loadErr: a node down
// elsewhere fails a load, not the calls.
func resendNoScript(ctx context.Context, rdb redis.UniversalClient, load [][]any, calls []scriptCall, loadErr error) (again bool) {
	resent := resendSome(calls, missingScript, func(resend []scriptCall) {
		if err := send(ctx, rdb, load, resend); loadErr == nil {
			loadErr = err
		}
	})
	for _, i := range resent {
		if missingScript(calls[i]) {
			again = true
			if loadErr != nil {
				calls[i].cmd.SetErr(loadErr)
			}
		}
	}
	return again
}

// keyNodes reaches the nodes of a client that routes by first key (a
// cluster, a Ring): the node of a key, by its map now, and every node.
type keyNodes struct {
	forKey  func(ctx context.Context, key string) (*redis.Client, error)
	forEach func(ctx context.Context, fn func(context.Context, *redis.Client) error) error
}

// keyNodesOf is rdb's keyNodes; routed is false for a client of one server.
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

// loadForCalls loads scripts on the node of each call that met NOSCRIPT,
// once per node, and returns the first load's error.
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
			err = send(ctx, node, load, nil)
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
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
	loaded := make([]*redis.Cmd, len(load))
	for i, argv := range load {
		loaded[i] = pipe.Do(ctx, argv...)
	}
	for i := range calls {
		calls[i].cmd = pipe.Do(ctx, calls[i].argv...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	for _, cmd := range loaded {
		if err := cmd.Err(); err != nil && !libraryLoaded(err) {
			return err
		}
	}
	return nil
}
