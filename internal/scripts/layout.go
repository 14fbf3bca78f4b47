package scripts

import (
	"strconv"
	"strings"
)

// Layout is the order of the KEYS a family of scripts takes, written once
// for Go and Lua: Go makes a lock's keys with Keys, and every script of the
// family starts with a Lua local per key, named as here, so neither side
// counts positions the other must match.
type Layout []Key

// Key is one key of a Layout: its Lua name, and what follows the lock's
// key in its own name (every key of a lock is the lock's key and a suffix).
type Key struct{ Lua, Suffix string }

// Keys are the KEYS of the lock whose key is lock, in the layout's order.
func (l Layout) Keys(lock string) []string {
	keys := make([]string, len(l))
	for i, k := range l {
		keys[i] = lock + k.Suffix
	}
	return keys
}

// Index is the position in Keys of the key named lua in the scripts; it
// panics for a name not in the layout, a mistake the first use shows.
func (l Layout) Index(lua string) int {
	for i, k := range l {
		if k.Lua == lua {
			return i
		}
	}
	panic("scripts: no key " + lua + " in the layout")
}

// locals is the Lua that names the layout's keys: KEYS beyond those a
// script is given are nil, as KEYS[i] would be.
func (l Layout) locals() string {
	names := make([]string, len(l))
	keys := make([]string, len(l))
	for i, k := range l {
		names[i], keys[i] = k.Lua, "KEYS["+strconv.Itoa(i+1)+"]"
	}
	return "local " + strings.Join(names, ", ") + " = " + strings.Join(keys, ", ") + "\n"
}

// RWLayout is the KEYS of the read-write scripts (rw_lib.lua says what
// each holds), a Mutex's keys among them; an attempt's tombstone follows.
var RWLayout = Layout{
	{"STATE", ""}, {"HOLDS", ":holds"}, {"WWAIT", ":waiters"}, {"RWAIT", ":rwaiters"},
	{"RPASS", ":rpass"}, {"WCHAN", ":wake"}, {"RCHAN", ":rwake"}, {"FENCE", ":fence"},
}

// AnyLockLayout is the KEYS of the scripts for a lock of any type
// (describe.lua, force_unlock.lua): RWLayout's, then the keys only other
// types have. Each script looks at every one to tell whether the name's
// keys are all dlock's.
var AnyLockLayout = append(RWLayout[:len(RWLayout):len(RWLayout)],
	Key{"PERMITS", ":permits"}, Key{"TOKENS", ":tokens"}, Key{"QUEUE", ":queue"},
	Key{"LEADER", ":leader"}, Key{"FORCED", ":forced"}, Key{"HOLDER", ":holder"})
