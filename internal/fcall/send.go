package fcall

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/scripts"
)

// Functions is what a Client (a Redlock's node) learnt of its servers:
// scripts go as FCALL of dlock's function library until a server refuses
// Functions (Redis < 7, an ACL without them), then by EVALSHA.
type Functions struct{ refused atomic.Bool }

// Preload loads dlock's library on rdb (where Functions are refused, the
// scripts of script's lock type) before a call needs it.
func (fns *Functions) Preload(ctx context.Context, rdb redis.UniversalClient, script *redis.Script) {
	if fns.refused.Load() || refusesFunctions(send(ctx, rdb, loads(true, nil), nil)) {
		fns.refused.Store(true)
		send(ctx, rdb, loads(false, scripts.Companions(script)), nil)
	}
}

// Call is one command Send sends, and its reply: a script's FCALL (or
// EVALSHA) or, without Script, ASKING before or WAIT after.
type Call struct {
	Script *redis.Script
	Argv   []any
	Cmd    *redis.Cmd
}

// Run runs script on rdb, as [redis.Script.Run] would but through Send.
func Run[A scripts.Args](ctx context.Context, fns *Functions, rdb redis.UniversalClient, script *redis.Script, keys []string, args A) *redis.Cmd {
	return sendScript(ctx, fns, rdb, script, Argv(script, keys, args))
}

// sendScript is Run with the command built, so that a hot path can
// keep what does not change (key names, TTLs) boxed once.
func sendScript(ctx context.Context, fns *Functions, rdb redis.UniversalClient, script *redis.Script, argv []any) *redis.Cmd {
	calls := [1]Call{{Script: script, Argv: argv}}
	Send(ctx, fns, rdb, calls[:])
	return calls[0].Cmd
}

// Send sends calls to rdb: one alone, more in one pipeline. A call that
// met a server without its scripts goes again after the load, in one
// pipeline; on a cluster or Ring the load goes to the call's node first,
// and to every node only if the call misses again, so a stalled node
// delays no other. A call whose load failed fails with its error.
func Send(ctx context.Context, fns *Functions, rdb redis.UniversalClient, calls []Call) {
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
	if slices.ContainsFunc(calls, func(call Call) bool { return refusedFunctions(call) && call.Argv[0] == "fcall" }) {
		fns.refused.Store(true)
		failed = refusedFunctions
	}
	if slices.ContainsFunc(calls, failed) {
		resendSome(calls, failed, func(again []Call) {
			asEvalsha(again)
			Send(ctx, fns, rdb, again)
		})
	}
}

// resendSome has send send the calls pick chooses, with the commands that
// frame them, and copies their replies back.
func resendSome(calls []Call, pick func(Call) bool, send func([]Call)) {
	var some []Call
	var at []int
	for i, call := range calls {
		if call.Script == nil || pick(call) {
			some, at = append(some, call), append(at, i)
		}
	}
	send(some)
	for j, i := range at {
		calls[i].Cmd = some[j].Cmd
	}
}

// asEvalsha makes the FCALLs of calls EVALSHA commands of their scripts.
func asEvalsha(calls []Call) {
	for i, call := range calls {
		if call.Script != nil && call.Argv[0] == "fcall" {
			argv := slices.Clone(call.Argv)
			argv[0], argv[1] = "evalsha", headOf(call.Script)[2]
			calls[i].Argv = argv
		}
	}
}

// loadsFor loads what the calls that met a missing script miss: the
// library for an FCALL, the scripts of its lock type for an EVALSHA.
func loadsFor(calls []Call) [][]any {
	var library bool
	var sources []string
	for _, call := range calls {
		switch {
		case !missingScript(call):
		case call.Argv[0] == "fcall":
			library = true
		default:
			sources = append(sources, scripts.Companions(call.Script)...)
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
func missingScript(call Call) bool {
	return call.Script != nil && call.Cmd != nil && (isNoScript(call.Cmd.Err()) || refusedFunctions(call))
}

// fullForLibrary tells an FCALL that failed as the load of its library
// did, on a full server (OOM).
func fullForLibrary(call Call) bool {
	return call.Script != nil && call.Cmd != nil && call.Argv[0] == "fcall" &&
		call.Cmd.Err() != nil && strings.HasPrefix(call.Cmd.Err().Error(), "OOM")
}

// refusedFunctions tells a script's call that met refusesFunctions' error.
func refusedFunctions(call Call) bool {
	return call.Script != nil && call.Cmd != nil && refusesFunctions(call.Cmd.Err())
}

// refusesFunctions tells the error of a server that does not take Redis
// Functions: FCALL or FUNCTION is unknown there, or not permitted.
func refusesFunctions(err error) bool {
	return (ErrSays(err, "unknown command") || err != nil && strings.HasPrefix(err.Error(), "NOPERM")) &&
		ErrSays(err, "'fcall'", "`fcall`", "'function", "`function`")
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
func (nodes keyNodes) loadEverywhere(ctx context.Context, rdb redis.UniversalClient, calls []Call, load [][]any, loadErr error) {
	ended, stop := make(chan error), make(chan struct{})
	defer close(stop)
	var allErr error
	go func() {
		allErr = nodes.forEach(ctx, func(ctx context.Context, node *redis.Client) error {
			err := send(ctx, node, load, nil)
			select {
			case ended <- err:
			case <-stop:
			}
			return err
		})
		close(ended) // allErr is read only once ended is closed
	}()
	for err := range ended {
		loadErr = cmp.Or(loadErr, err)
		if !resendNoScript(ctx, rdb, nil, calls, nil) {
			return
		}
	}
	resendNoScript(ctx, rdb, nil, calls, cmp.Or(loadErr, allErr))
}

// resendNoScript sends the calls that met NOSCRIPT again after load, and
// reports whether one met it again. Only those get loadErr: a node down
// elsewhere fails a load, not the calls.
func resendNoScript(ctx context.Context, rdb redis.UniversalClient, load [][]any, calls []Call, loadErr error) (again bool) {
	resendSome(calls, missingScript, func(resend []Call) {
		loadErr = cmp.Or(loadErr, send(ctx, rdb, load, resend))
	})
	for i := range calls { // those not resent did not miss their script
		if missingScript(calls[i]) {
			again = true
			if loadErr != nil {
				calls[i].Cmd.SetErr(loadErr)
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

// Routed tells a client that routes by first key (a cluster, a Ring).
func Routed(rdb redis.UniversalClient) bool {
	_, routed := keyNodesOf(rdb)
	return routed
}

// MasterFor is the client of the master that holds key: a cluster node, a
// Ring shard, else rdb.
func MasterFor(ctx context.Context, rdb redis.UniversalClient, key string) (redis.UniversalClient, error) {
	if nodes, routed := keyNodesOf(rdb); routed {
		return nodes.forKey(ctx, key)
	}
	return rdb, nil
}

// loadForCalls loads scripts on the node of each call that met NOSCRIPT,
// once per node, and returns the first load's error.
func (nodes keyNodes) loadForCalls(ctx context.Context, calls []Call, load [][]any) error {
	var firstErr error
	done := map[string]bool{}
	for _, call := range calls {
		key, ok := firstKey(call.Argv)
		if !missingScript(call) || !ok {
			continue
		}
		node, err := nodes.forKey(ctx, key)
		if err == nil && !done[node.Options().Addr] {
			done[node.Options().Addr] = true
			err = send(ctx, node, load, nil)
		}
		firstErr = cmp.Or(firstErr, err)
	}
	return firstErr
}

// send sends the commands of load (FUNCTION LOAD, SCRIPT LOAD), then
// calls, on rdb: a call alone as a command, more as one pipeline. It
// returns the first load's error; a library loaded already is none.
func send(ctx context.Context, rdb redis.UniversalClient, load [][]any, calls []Call) error {
	if len(load) == 0 && len(calls) == 1 {
		calls[0].Cmd = rdb.Do(ctx, calls[0].Argv...)
		return nil
	}
	pipe := rdb.Pipeline()
	loaded := make([]*redis.Cmd, len(load))
	for i, argv := range load {
		loaded[i] = pipe.Do(ctx, argv...)
	}
	for i := range calls {
		calls[i].Cmd = pipe.Do(ctx, calls[i].Argv...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	for _, cmd := range loaded {
		if err := cmd.Err(); err != nil && !libraryLoaded(err) {
			return err
		}
	}
	return nil
}

// isNoScript recognises a server without a script or dlock's functions.
func isNoScript(err error) bool {
	return err != nil && (strings.HasPrefix(err.Error(), "NOSCRIPT") || strings.HasPrefix(err.Error(), "ERR Function not found"))
}

// ErrSays reports whether err's text holds any of words: Redis's errors
// are told apart by their text.
func ErrSays(err error, words ...string) bool {
	return err != nil && slices.ContainsFunc(words, func(w string) bool { return strings.Contains(err.Error(), w) })
}

// IsPermission recognises an ACL refusal, of a command or of one a script
// ran, in the words of Redis 7.0, Redis 8 and Valkey.
func IsPermission(err error) bool {
	return ErrSays(err, "NOPERM", "executing the script can't", "ACL failure in script", "No permissions to access")
}

// ErrUnexpectedReply: a reply not of the shape its script promises.
var ErrUnexpectedReply = errors.New("unexpected reply from Redis")

// Int64s reads the first n elements of a script's reply as integers.
func Int64s(reply []any, n int) ([]int64, error) {
	if len(reply) < n {
		return nil, ErrUnexpectedReply
	}
	r := make([]int64, n)
	for i := range r {
		v, ok := reply[i].(int64)
		if !ok {
			return nil, ErrUnexpectedReply
		}
		r[i] = v
	}
	return r, nil
}
