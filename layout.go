package dlock

import (
	"slices"
	"strings"

	"github.com/dlockio/dlock/internal/scripts"
)

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

// callKeys are the KEYS of a script on layout for one call, with perCall.
func (k keys) callKeys(layout scripts.Layout, perCall ...string) []string {
	keys := make([]string, 0, len(layout))
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

// layOut lays out the KEYS of s's acquire, its kind's release, abandon and
// extend (the kind's when nil; extend's are TTL's too) and extra, boxes s
// (nil: h invalid) and returns extra's KEYS. Waiters listen on h's channel.
func (h *handle) layOut(s acquireSpec, abandon, extend scripts.Layout, extra ...scripts.Layout) (*acquireSpec, [][]string) {
	lists := make([][]string, len(extra))
	if h.err != nil {
		return nil, lists
	}
	if abandon == nil {
		abandon = scripts.LayoutOf(s.lease.kind.abandon)
	}
	if extend == nil {
		extend = scripts.LayoutOf(s.lease.kind.extend)
	}
	lay := newKeyLists(h.keys)
	acquire, release := lay.add(scripts.LayoutOf(s.script)), lay.add(scripts.LayoutOf(s.lease.kind.release))
	abandonAt, extendAt, own := lay.add(abandon), lay.add(extend), lay.also(h.keys.own)
	for i, layout := range extra {
		lists[i] = lay.list(lay.add(layout))[0]
	}
	s.channels = lay.list(own)[0]
	s.keys, s.abandonKeys, s.lease.keys, s.releaseKeys = lay.list(acquire), lay.list(abandonAt), lay.list(extendAt)[0], lay.list(release)[0]
	return h.boxed(s), lists
}

// keyLists lays out a handle's KEYS in one array, derived names made once
// (a handle is often made for one call); list reads add's and also's places.
type keyLists struct {
	k     keys
	names []string
}

// keyList is one list's place in keyLists' names: its start, its first
// per-call key's place (or end), its end.
type keyList struct{ start, split, end int }

// newKeyLists returns empty lists with room for a FairMutex's 22 names.
func newKeyLists(k keys) keyLists { return keyLists{k: k, names: make([]string, 0, 24)} }

// add lays out a script's KEYS on layout, but for per-call ones (see list).
func (l *keyLists) add(layout scripts.Layout) keyList {
	start := len(l.names)
	for _, key := range layout {
		if !key.PerCall {
			l.names = append(l.names, l.name(key))
		}
	}
	split := slices.IndexFunc(layout, func(key scripts.Key) bool { return key.PerCall })
	if split < 0 {
		split = len(l.names) - start
	}
	return keyList{start, start + split, len(l.names)}
}

// also lays out a list of names: a handle's own channel.
func (l *keyLists) also(names ...string) keyList {
	start := len(l.names)
	l.names = append(l.names, names...)
	return keyList{start, len(l.names), len(l.names)}
}

// name is k's key named key: k's own, one laid out already, or made.
func (l *keyLists) name(key scripts.Key) string {
	if name, ok := l.k.named(key); ok {
		return name
	}
	for _, name := range l.names {
		if len(name) == len(l.k.lock)+len(key.Suffix) && strings.HasPrefix(name, l.k.lock) && strings.HasSuffix(name, key.Suffix) {
			return name
		}
	}
	return l.k.lock + key.Suffix
}

// list is the list at p: its keys before and after those each call adds.
func (l *keyLists) list(p keyList) [2][]string {
	return [2][]string{l.names[p.start:p.split:p.split], l.names[p.split:p.end:p.end]}
}
