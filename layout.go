package dlock

import (
	"slices"
	"strings"

	"github.com/dlockio/dlock/internal/scripts"
)

// The KEYS of the scripts are made by the scripts' layouts
// (internal/scripts/layout.go), which also name them in Lua: no Go code
// counts a key's position.

// named is the key of k's lock that key names in a layout, when k keeps it.
func (k keys) named(key scripts.Key) (string, bool) {
	switch key.Suffix {
	case "":
		return k.lock, true
	case scripts.FenceSuffix:
		return k.fence, true
	case scripts.ChannelSuffix:
		return k.channel, true
	case scripts.WaitersSuffix:
		return k.waiters, true
	}
	return "", false
}

// callKeys are the KEYS of a script on layout for one call on k's lock,
// perCall giving its per-call keys (a tombstone) in order; every other key
// is one k keeps.
func (k keys) callKeys(layout scripts.Layout, perCall ...string) []string {
	return k.appendKeys(make([]string, 0, len(layout)), layout, perCall...)
}

// appendKeys is callKeys appended to keys.
func (k keys) appendKeys(keys []string, layout scripts.Layout, perCall ...string) []string {
	for _, key := range layout {
		if key.PerCall {
			keys, perCall = append(keys, perCall[0]), perCall[1:]
			continue
		}
		name, ok := k.named(key)
		if !ok {
			panic("dlock: a call's key " + key.Lua + " made anew")
		}
		keys = append(keys, name)
	}
	return keys
}

// keyLists lays out the KEYS of a handle's scripts in one array: a handle
// is often made for one call, and each list apart was an allocation of its
// own. A list equal to one laid out before is that one, and a name k does
// not keep is made once. Its zero value, with k set, is ready; lists
// returns the lists added, each by the number add gave. Every type's lists
// fit in names and spans with room to spare (the most: an Election's, 19
// names in 8 lists); a type that needs more fails its first handle, out
// of range.
type keyLists struct {
	k     keys
	names [32]string
	n     int
	spans [12][3]int // a list's start, its first per-call key's place (or end), end
	m     int
}

// add lays out the KEYS of a script on layout, but for its per-call keys
// (see lists), and returns the list's number.
func (l *keyLists) add(layout scripts.Layout) int {
	start, split := l.n, -1
	for _, key := range layout {
		if key.PerCall {
			if split < 0 {
				split = l.n
			}
			continue
		}
		l.names[l.n] = l.name(key)
		l.n++
	}
	if split < 0 {
		split = l.n
	}
	return l.span(start, split)
}

// also lays out a list of names: a handle's own channel.
func (l *keyLists) also(names ...string) int {
	start := l.n
	l.n += copy(l.names[start:], names)
	return l.span(start, l.n)
}

// span records the list just laid out at start, split at split; an earlier
// one equal to it stands for it.
func (l *keyLists) span(start, split int) int {
	list := l.names[start:l.n]
	for i := range start {
		if i+len(list) <= start && slices.Equal(l.names[i:i+len(list)], list) {
			l.n = start
			l.spans[l.m] = [3]int{i, i + split - start, i + len(list)}
			l.m++
			return l.m - 1
		}
	}
	l.spans[l.m] = [3]int{start, split, l.n}
	l.m++
	return l.m - 1
}

// name is k's key named key: k's own, one laid out already, or made.
func (l *keyLists) name(key scripts.Key) string {
	if name, ok := l.k.named(key); ok {
		return name
	}
	for _, name := range l.names[:l.n] {
		if len(name) == len(l.k.lock)+len(key.Suffix) && strings.HasPrefix(name, l.k.lock) && strings.HasSuffix(name, key.Suffix) {
			return name
		}
	}
	return l.k.lock + key.Suffix
}

// lists are the lists added, by their numbers, in one array: each is the
// keys before its first per-call key (a tombstone, a release mark) and
// those after it. The per-call keys are added by each call: an attempt's
// tombstone (call.argv) in between, a release's mark and tombstone
// (clientHold) after the first part, which is all of a release's.
func (l *keyLists) lists() (lists [12][2][]string) {
	all := slices.Clone(l.names[:l.n])
	for i, s := range l.spans[:l.m] {
		lists[i] = [2][]string{all[s[0]:s[1]:s[1]], all[s[1]:s[2]:s[2]]}
	}
	return lists
}
