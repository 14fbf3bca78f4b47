package scripts

import (
	"slices"
	"strconv"
	"strings"
)

// Layout is the order of a script's KEYS, written once: Go makes a lock's
// keys from it, the script names them by it (locals); neither counts places.
type Layout []Key

// Key is one key of a Layout: its Lua name, and the suffix that follows the
// lock's key in its name.
type Key struct {
	Lua, Suffix string
	PerCall     bool   // a key of one call or hold (a tombstone, a release mark), named by a hash of its secret
	Form        Form   // what dlock writes there, which foreign_lock checks (AnyLockLayout)
	Held        bool   // a key beside the lock that holds holds: ForceUnlock removes it with the lock's key
	Tells       string // for Describe: the kind (observe.Kind) of a lock holding an owner token with this key beside it
}

// Form is what dlock writes under a key, which foreign_lock (foreign.lua)
// checks: its name is the field of anyLockLocals' table listing its keys.
type Form string

const (
	FormLock    Form = "lock"    // the lock's key: an owner token, a read-write state, a Semaphore's holders
	FormZset    Form = "zsets"   // a sorted set beside the lock, with a TTL
	FormHash    Form = "hashes"  // a hash beside the lock, with a TTL
	FormFence   Form = "fences"  // a fencing counter
	FormNumber  Form = "numbers" // a number (a Semaphore's permits)
	FormLeader  Form = "leaders" // an Election's leader record
	FormHolder  Form = "holders" // a hold's holder info (removed with the hold)
	FormForced  Form = "forced"  // the mark of a forced removal
	FormChannel Form = "channel" // a channel, which stores nothing
)

// checkedForms are the forms beside the lock's key, in foreign_lock's order.
var checkedForms = []Form{FormZset, FormHash, FormFence, FormNumber, FormLeader, FormHolder, FormForced}

// What follows a lock's key in the names of its other keys.
const (
	FenceSuffix    = ":fence"    // fencing counter
	WaitersSuffix  = ":waiters"  // registrations of waiters (of writers, for an RWMutex)
	ChannelSuffix  = ":wake"     // wake-up channel (of writers, for an RWMutex)
	HoldsSuffix    = ":holds"    // an RWMutex's holds
	RWaitersSuffix = ":rwaiters" // an RWMutex's waiting readers
	RPassSuffix    = ":rpass"    // an RWMutex's readers let past a writer
	RChannelSuffix = ":rwake"    // an RWMutex's readers' wake-up channel
	QueueSuffix    = ":queue"    // a FairMutex's queue
	LeaderSuffix   = ":leader"   // an Election's leadership, and its observers' channel
	ForcedSuffix   = ":forced"   // the mark of a forced removal (force_unlock.lua)
	HolderSuffix   = ":holder"   // a Mutex's or FairMutex's holder info
)

// The keys of one call or hold, after the lock's: the call's tombstone and
// a hold's release mark (a release takes its mark, then the tombstone).
var (
	Tombstone   = Key{Lua: "TOMBSTONE", Suffix: ":void:", PerCall: true}
	ReleaseMark = Key{Lua: "RELEASE_MARK", Suffix: ":released:", PerCall: true}
)

// Keys are the KEYS of the lock whose key is lock; no key may be PerCall.
func (l Layout) Keys(lock string) []string {
	keys := make([]string, len(l))
	for i, k := range l {
		keys[i] = lock + k.Suffix
	}
	return keys
}

// Index is the position of the key named lua; it panics for one not there.
func (l Layout) Index(lua string) int {
	if i := slices.IndexFunc(l, func(k Key) bool { return k.Lua == lua }); i >= 0 {
		return i
	}
	panic("scripts: no key " + lua + " in the layout")
}

// Before is the layout up to the key named lua.
func (l Layout) Before(lua string) Layout {
	i := l.Index(lua)
	return l[:i:i]
}

// Only is the layout of the key named lua alone.
func (l Layout) Only(lua string) Layout {
	i := l.Index(lua)
	return l[i : i+1 : i+1]
}

// Then is the layout followed by keys.
func (l Layout) Then(keys ...Key) Layout {
	return append(l[:len(l):len(l)], keys...)
}

// locals is the Lua that names the keys, the i-th KEYS[offset .. i] (offset
// is Lua, "2 * N + " say): those beyond a script's KEYS are nil.
func (l Layout) locals(offset string) string {
	var names, keys []string
	for i, k := range l {
		names, keys = append(names, k.Lua), append(keys, "KEYS["+offset+strconv.Itoa(i+1)+"]")
	}
	return "local " + strings.Join(names, ", ") + " = " + strings.Join(keys, ", ") + "\n"
}

// The keys of a lock as the scripts of most types name them.
var (
	keyLock    = Key{Lua: "LOCK", Form: FormLock}
	keyFence   = Key{Lua: "FENCE", Suffix: FenceSuffix, Form: FormFence}
	keyWaiters = Key{Lua: "WAITERS", Suffix: WaitersSuffix, Form: FormZset}
	keyChannel = Key{Lua: "CHANNEL", Suffix: ChannelSuffix, Form: FormChannel}
	keyHolder  = Key{Lua: "HOLDER", Suffix: HolderSuffix, Form: FormHolder}
	keyForced  = Key{Lua: "FORCED", Suffix: ForcedSuffix, Form: FormForced}
)

// The KEYS of the Mutex scripts (their headers say what each holds). A
// Redlock's node and an Election take them up to HOLDER.
var (
	MutexAcquireLayout = Layout{keyLock, keyFence, Tombstone, keyWaiters, keyHolder}
	MutexReleaseLayout = Layout{keyLock, keyChannel, keyWaiters, keyFence, keyHolder, ReleaseMark, Tombstone}
	MutexExtendLayout  = Layout{keyLock, keyForced, keyHolder} // MutexTTL's too: it reads LOCK alone
	MutexAbandonLayout = Layout{keyLock, keyChannel, Tombstone, keyWaiters, keyFence, keyHolder}
	RedlockFenceLayout = Layout{keyFence}
)

// FairLayout is the KEYS of the FairMutex scripts (fair_lib.lua says what
// each holds), before the call's and the hold's own.
var FairLayout = Layout{keyLock, keyFence, {Lua: "QUEUE", Suffix: QueueSuffix, Form: FormZset, Tells: "fair"},
	{Lua: "REG", Suffix: WaitersSuffix, Form: FormZset}, keyChannel, keyHolder}

// MultiPartLayout is a MultiLock script's KEYS per lock (see partLocals).
var MultiPartLayout = Layout{keyLock, keyFence, keyWaiters, keyChannel}

// The KEYS of the Election scripts (their headers say what each holds).
// The leader hash's name is also its observers' channel.
var (
	keyLeader    = Key{Lua: "LEADER", Suffix: LeaderSuffix, Form: FormLeader}
	keyObservers = Key{Lua: "OBSERVERS", Suffix: LeaderSuffix, Form: FormChannel}

	ElectionAcquireLayout  = Layout{keyLock, keyFence, Tombstone, keyWaiters, keyLeader}    // LEADER names the channel: a KEYS element less
	ElectionReleaseLayout  = Layout{keyLock, keyWaiters, keyLeader, ReleaseMark, Tombstone} // CHANNEL made of LOCK where a waiter is woken
	ElectionProclaimLayout = Layout{keyLock, keyLeader, keyObservers}                       // ElectionLeader's too: it reads LOCK and LEADER
)

// RWLayout is the KEYS of the read-write scripts (see rw_lib.lua), before
// the call's and the hold's own; a release takes its mark in FENCE's place.
var RWLayout = Layout{
	{Lua: "STATE", Form: FormLock}, {Lua: "HOLDS", Suffix: HoldsSuffix, Form: FormZset, Held: true},
	{Lua: "WWAIT", Suffix: WaitersSuffix, Form: FormZset}, {Lua: "RWAIT", Suffix: RWaitersSuffix, Form: FormZset},
	{Lua: "RPASS", Suffix: RPassSuffix, Form: FormZset, Held: true}, {Lua: "WCHAN", Suffix: ChannelSuffix, Form: FormChannel},
	{Lua: "RCHAN", Suffix: RChannelSuffix, Form: FormChannel}, keyFence,
}

// AnyLockLayout is describe.lua's and force_unlock.lua's KEYS: RWLayout's,
// then, in order, the lock types' keys whose suffix it lacks. A suffix's keys
// agree on their form but for a channel, which may share a name (a leader's).
var AnyLockLayout = func() Layout {
	l := RWLayout.Then()
	for _, s := range slices.Concat(lockTypeScripts...) {
		for _, k := range assembled[s].layout {
			i := slices.IndexFunc(l, func(in Key) bool { return in.Suffix == k.Suffix })
			switch {
			case k.PerCall:
			case k.Form == "":
				panic("scripts: key " + k.Lua + " has no form")
			case i < 0:
				l = append(l, k)
			case l[i].Form != k.Form && k.Form != FormChannel && l[i].Form != FormChannel,
				l[i].Held != k.Held, l[i].Tells != k.Tells && k.Form != FormChannel:
				panic("scripts: keys " + k.Lua + " and " + l[i].Lua + " disagree")
			case l[i].Form == FormChannel:
				l[i] = k
			}
		}
	}
	return l
}()

// anyLockLocals is the Lua that lists l's keys for foreign_lock, by form;
// held, the keys ForceUnlock removes; tells, {key, kind} of keys Tells.
func (l Layout) anyLockLocals() string {
	var held, tells []string
	byForm := make(map[Form][]string)
	for _, k := range l {
		byForm[k.Form] = append(byForm[k.Form], k.Lua)
		if k.Held || k.Form == FormLock {
			held = append(held, k.Lua)
		}
		if k.Tells != "" {
			tells = append(tells, "{"+k.Lua+", '"+k.Tells+"'}")
		}
	}
	fields := make([]string, 0, len(checkedForms)+2)
	for _, f := range checkedForms {
		fields = append(fields, string(f)+" = {"+strings.Join(byForm[f], ", ")+"}")
	}
	fields = append(fields, "held = {"+strings.Join(held, ", ")+"}", "tells = {"+strings.Join(tells, ", ")+"}")
	return "local ANY = {" + strings.Join(fields, ", ") + "}\n"
}

// partLocals names the keys of a script on parts (a MultiLock's), key by
// key (every part's first, then every second...), then tail: N, the parts;
// part(i), the i-th's keys (values: a table per call costs); LOCK_FROM,
// LOCK_TO (and so on), the KEYS of the parts' LOCK, for unpack(KEYS, ...).
// The tail is shorter than a part, so N is exact.
func partLocals(part, tail Layout) string {
	if len(tail) >= len(part) {
		panic("scripts: a tail as long as a part")
	}
	times := func(i int) string { // i * N, as the scripts write it
		if i == 1 {
			return "N"
		}
		return strconv.Itoa(i) + " * N"
	}
	fields := []string{"KEYS[i]"}
	ranges := []string{"1", "N"}
	var bounds []string
	for i, k := range part {
		bounds = append(bounds, k.Lua+"_FROM", k.Lua+"_TO")
		if i > 0 {
			fields = append(fields, "KEYS["+times(i)+" + i]")
			ranges = append(ranges, times(i)+" + 1", times(i+1))
		}
	}
	src := "local N = math.floor(#KEYS / " + strconv.Itoa(len(part)) + ")\n" +
		"local function part(i)\n  return " + strings.Join(fields, ", ") + "\nend\n" +
		"local " + strings.Join(bounds, ", ") + " = " + strings.Join(ranges, ", ") + "\n"
	if len(tail) == 0 {
		return src
	}
	return src + tail.locals(times(len(part))+" + ")
}
