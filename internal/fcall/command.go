// Package fcall sends dlock's scripts to Redis, as FCALL or EVALSHA
// ([Functions]), loading them on the nodes that lack them ([Send]). It
// also batches concurrent calls into pipelines ([Coalescer]) and sends
// calls with WAIT after them ([SendAcknowledged]).
//
// What a reply means is the caller's to judge: this package knows
// commands and servers, not locks.
package fcall

import (
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/scripts"
)

// Argv is the FCALL (EVALSHA, for a script not in the library) of script
// on keys and args.
func Argv[A scripts.Args](script *redis.Script, keys []string, args A) []any {
	return args.Append(CommandOn(script, nil, keys, 0))
}

// ArgRoom is what CommandOn leaves for a script's ARGV: the most any
// takes but for a MultiLock's release (which grows its command).
const ArgRoom = 7

// CommandOn starts script's command: its KEYS, boxed and then keys, more
// of them following; then its ARGV may be appended.
func CommandOn(script *redis.Script, boxed []any, keys []string, more int) []any {
	argv := make([]any, 0, 3+len(boxed)+len(keys)+more+ArgRoom)
	name, id := Head(script)
	argv = append(append(argv, name, id, len(boxed)+len(keys)+more), boxed...)
	for _, k := range keys {
		argv = append(argv, k)
	}
	return argv
}

// firstKey is the first key of a command CommandOn started, if it has one.
func firstKey(argv []any) (key string, ok bool) {
	if len(argv) < 4 || argv[2] == 0 {
		return "", false
	}
	key, _ = argv[3].(string) // after the command's name, its function (or SHA) and the number of keys
	return key, true
}

// Head is how a command of script starts: FCALL and its function, or
// EVALSHA and its SHA for a script not in dlock's library.
func Head(script *redis.Script) (name, id any) {
	head := headOf(script)
	return head[0], head[1]
}

var heads sync.Map // *redis.Script → [3]any{Head's name and id, SHA}, boxed once per process

func headOf(script *redis.Script) [3]any {
	if v, ok := heads.Load(script); ok {
		return v.([3]any)
	}
	head := [3]any{"evalsha", script.Hash(), script.Hash()}
	if fn := scripts.Function(script); fn != "" {
		head[0], head[1] = "fcall", fn
	}
	v, _ := heads.LoadOrStore(script, head)
	return v.([3]any)
}
