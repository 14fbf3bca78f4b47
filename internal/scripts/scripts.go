// Package scripts holds the Lua scripts dlock runs in Redis, a file per
// operation whose header states its KEYS, ARGV and replies. Go and Lua name
// a script's KEYS by its Layout (layout.go), its ARGV by its struct (args.go).
// Each gets the prelude and only the helpers it calls (assemble.go), and is
// a function of one Functions library (library.go), called by FCALL, or by
// EVALSHA where Functions are refused (internal/fcall).
package scripts

import (
	"embed"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var luaFiles embed.FS

// lua is the text of the embedded file name.lua.
func lua(name string) string {
	src, err := luaFiles.ReadFile(name + ".lua")
	if err != nil {
		panic(err) // a script named here that is not in the package
	}
	return string(src)
}

// OwnerTokenDigits is the length of an owner token, in lowercase hex
// digits; the scripts take another form for a value dlock did not write.
const OwnerTokenDigits = 32

// ClientTagChars is the length of a Client's tag (see ProtocolTag), which
// starts its registrations and names its channel.
const ClientTagChars = 16

// ProtocolVersion is the version of the forms clients share in Redis
// (registrations, hand-overs, lock values). A Client's tag carries it, so a
// script wakes a waiter of a protocol it does not read rather than hand it
// a lock. docs/ARCHITECTURE.md says how a deployment upgrades.
const ProtocolVersion = 2

// ProtocolTag starts the tag of every Client of this protocol.
var ProtocolTag = "v" + strconv.Itoa(ProtocolVersion)

// prelude starts every script: the constants the scripts take from Go, so
// each rule is written once, then common.lua and foreign.lua.
var prelude = fmt.Sprintf("local OWNER_TOKEN = '^%s$'\n", strings.Repeat("[0-9a-f]", OwnerTokenDigits)) +
	"local PROTOCOL_TAG = '" + ProtocolTag + "'\n" +
	fmt.Sprintf("local OWNER_TOKEN_DIGITS = %d\n", OwnerTokenDigits) +
	fmt.Sprintf("local CLIENT_TAG_CHARS = %d\n", ClientTagChars) +
	fmt.Sprintf("local HOLDER_INFO = '^%s{'\n", strings.Repeat("[0-9a-f]", OwnerTokenDigits)) +
	"local FENCE_RETENTION_TTLS = " + strconv.Itoa(FenceRetentionTTLs) + "\n" +
	"local FENCE_RETENTION_ZEROS = '" + strconv.Itoa(FenceRetentionTTLs)[1:] + "'\n" +
	"local RIGHTS_KNOWN = '" + RightsKnown + "'\n" +
	"local MARK_TTL = '" + strconv.FormatInt(ReleaseMarkLife.Milliseconds(), 10) + "'\n" +
	"local VOID_TTL = '" + strconv.FormatInt(TombstoneLife.Milliseconds(), 10) + "'\n" +
	"local CHANNEL_SUFFIX = '" + ChannelSuffix + "'\n" +
	lua("common") + lua("foreign")

// script makes a script of the prelude and parts, with only the helpers it
// calls, on layout's KEYS named by keys (Lua) and args' ARGV. An acquire
// checks the rights of others' commands too (see rightsFor).
func script(layout Layout, keys string, args any, others []*redis.Script, parts ...string) *redis.Script {
	segs := assembleSegments(append([]string{prelude, keys + argLocals(args)}, parts...))
	rights := rightsFor(joined(segs), others)
	src := strings.Replace(joined(segs), rightsList, rights, 1)
	s := redis.NewScript(src)
	assembled[s] = assembly{src, layout, args, segs, rights, others, readsOnly(src)}
	return s
}

// scriptOn makes a script on layout's KEYS; others are an acquire's.
func scriptOn(layout Layout, args any, others []*redis.Script, parts ...string) *redis.Script {
	return script(layout, layout.locals(""), args, others, parts...)
}

// scriptOnParts makes a script on a MultiLock group's KEYS (see partLocals).
func scriptOnParts(part, tail Layout, args any, others []*redis.Script, parts ...string) *redis.Script {
	return script(part.Then(tail...), partLocals(part, tail), args, others, parts...)
}

// readsOnly tells a script that writes nothing: its function is flagged
// no-writes, sparing it a write's checks (READONLY, a failing save).
func readsOnly(src string) bool {
	writes := func(name string) bool { return !readCommands[name] }
	return !variableCommand.MatchString(withoutComments(src)) && !slices.ContainsFunc(commandsRun(src), writes)
}

// variableCommand finds a command named by a variable (PUBLISH's, which
// may be SPUBLISH); call_or_wrongtype and call_on pass theirs on.
var variableCommand = regexp.MustCompile(`redis\.p?call\([A-Za-z]`)

// readCommands are the commands dlock's scripts run that write nothing.
var readCommands = map[string]bool{
	"exists": true, "get": true, "hget": true, "hgetall": true, "hlen": true, "pttl": true,
	"hmget": true, "mget": true, "time": true, "type": true, "zcard": true, "zcount": true, "zrange": true, "zrangebyscore": true, "zscore": true,
}

// rightsList is rights_refused's list (common.lua), for rightsFor to fill.
const rightsList = "local SCRIPT_COMMANDS = {}"

// scriptCommand finds a command run on keys by redis.(p)call, call_on or
// (call|text)_or_wrongtype; PUBLISH, named by a variable, is on a channel.
var scriptCommand = regexp.MustCompile(`(?:redis\.p?call\(|(?:call|text)_or_wrongtype\(|call_on\([^,\n]+, )'([A-Z]+)'`)

// rightsFor is rights_refused's list filled for src, where src has it: the
// commands src and others run on keys. Redis does not undo a script's
// writes when a later command is refused, so the acquire refuses the lock
// before it writes.
func rightsFor(src string, others []*redis.Script) string {
	if !strings.Contains(src, rightsList) {
		return rightsList
	}
	names := commandsRun(src)
	for _, other := range others {
		names = append(names, commandsRun(assembled[other].src)...)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	return "local SCRIPT_COMMANDS = {'" + strings.Join(names, "', '") + "'}"
}

// commandsRun are the commands src runs on keys, in lowercase as in ACLs.
func commandsRun(src string) []string {
	var names []string
	for _, m := range scriptCommand.FindAllStringSubmatch(withoutComments(src), -1) {
		names = append(names, strings.ToLower(m[1]))
	}
	return names
}

// assembled is each script as script made it.
var assembled = make(map[*redis.Script]assembly)

type assembly struct {
	src    string // for SCRIPT LOAD in a pipeline: a [redis.Script] keeps its own to itself
	layout Layout // for LayoutOf
	args   any    // its ARGV struct (args.go), for Arg
	segs   []helper
	rights string          // rights_refused's list (see rightsFor)
	others []*redis.Script // an acquire's: its type's scripts its leases run later
	reads  bool            // it writes nothing (readsOnly)
}

// LayoutOf is the layout of s's KEYS, a group of one lock's for a MultiLock
// script; none for a script not made here.
func LayoutOf(s *redis.Script) Layout { return assembled[s].layout }

// Mutex scripts, a Redlock's too: its set has RedlockFence.
var (
	MutexAcquire = scriptOn(MutexAcquireLayout, MutexAcquireArgs{}, []*redis.Script{MutexRelease, MutexExtend, MutexTTL, MutexAbandon, RedlockFence}, lua("mutex_acquire"))
	MutexRelease = scriptOn(MutexReleaseLayout, ReleaseArgs{}, nil, lua("hand_next"), lua("mutex_release"))
	MutexExtend  = scriptOn(MutexExtendLayout, ExtendArgs{}, nil, lua("mutex_extend"))
	MutexTTL     = scriptOn(MutexExtendLayout, OwnerArgs{}, nil, lua("mutex_ttl"))
	MutexAbandon = scriptOn(MutexAbandonLayout, AbandonArgs{}, nil, lua("hand_next"), lua("mutex_abandon"))
)

// FairMutex scripts. A FairMutex's lock key is a Mutex's, so it renews and
// inspects its holds with MutexExtend and MutexTTL.
var (
	FairAcquire = scriptOn(FairLayout.Then(Tombstone), FairAcquireArgs{}, []*redis.Script{FairRelease, FairAbandon, MutexExtend, MutexTTL}, lua("fair_lib"), lua("fair_acquire"))
	FairRelease = scriptOn(FairLayout.Then(ReleaseMark, Tombstone), ReleaseArgs{}, nil, lua("fair_lib"), lua("fair_release"))
	FairAbandon = scriptOn(FairLayout.Then(Tombstone), AbandonArgs{}, nil, lua("fair_lib"), lua("fair_abandon"))
)

// MultiLock scripts, for a group of Mutex locks in one slot.
var (
	MultiAcquire = scriptOnParts(MultiPartLayout, Layout{Tombstone}, MultiAcquireArgs{}, []*redis.Script{MultiRelease, MultiExtend, MultiTTL, MultiAbandon}, lua("hand_next"), lua("multi_lib"), lua("multi_acquire"))
	MultiRelease = scriptOnParts(MultiPartLayout, Layout{ReleaseMark, Tombstone}, MultiReleaseArgs{}, nil, lua("hand_next"), lua("multi_lib"), lua("multi_release"))
	MultiExtend  = scriptOnParts(MultiPartLayout, nil, ExtendArgs{}, nil, lua("multi_lib"), lua("multi_extend"))
	MultiTTL     = scriptOnParts(MultiPartLayout, nil, OwnerArgs{}, nil, lua("multi_lib"), lua("multi_ttl"))
	MultiAbandon = scriptOnParts(MultiPartLayout, Layout{Tombstone}, AbandonArgs{}, nil, lua("hand_next"), lua("multi_lib"), lua("multi_abandon"))
)

// Election scripts. A leadership is a Mutex hold: it is renewed with
// MutexExtend and MutexTTL and given up in doubt with MutexAbandon.
var (
	ElectionAcquire  = scriptOn(ElectionAcquireLayout, ElectionAcquireArgs{}, []*redis.Script{ElectionRelease, ElectionProclaim, ElectionLeader, MutexExtend, MutexTTL, MutexAbandon}, lua("election_lib"), lua("election_acquire"))
	ElectionRelease  = scriptOn(ElectionReleaseLayout, ReleaseArgs{}, nil, lua("election_release"))
	ElectionProclaim = scriptOn(ElectionProclaimLayout, ProclaimArgs{}, nil, lua("election_proclaim"))
	ElectionLeader   = scriptOn(ElectionProclaimLayout, NoArgs{}, nil, lua("election_leader"))
)

// RedlockFence raises a node's fencing counter to a quorum's token; a
// Redlock's holds are Mutex holds on each node.
var RedlockFence = scriptOn(RedlockFenceLayout, FenceArgs{}, nil, lua("redlock_fence"))

// Scripts for any type of lock, on AnyLockLayout (by form in ANY).
var (
	ForceUnlock = scriptOn(AnyLockLayout, PublishArgs{}, nil, AnyLockLayout.anyLockLocals(), lua("rw_lib"), lua("force_unlock"))
	Describe    = scriptOn(AnyLockLayout, OwnerArgs{}, nil, AnyLockLayout.anyLockLocals(), lua("rw_lib"), lua("describe"))
)

// RWMutex scripts, also those of ReentrantMutex: its holds are write holds.
var (
	RWAcquire = scriptOn(RWLayout.Then(Tombstone), RWAcquireArgs{}, []*redis.Script{RWRelease, RWExtend, RWTTL, RWAbandon, RWInspect}, lua("rw_lib"), lua("rw_acquire"))
	RWRelease = scriptOn(RWLayout.Before("FENCE").Then(ReleaseMark, Tombstone), ReleaseArgs{}, nil, lua("rw_lib"), lua("rw_release"))
	RWExtend  = scriptOn(RWLayout, ExtendArgs{}, nil, lua("rw_lib"), lua("rw_extend"))
	RWTTL     = scriptOn(RWLayout, OwnerArgs{}, nil, lua("rw_lib"), lua("rw_ttl"))
	RWAbandon = scriptOn(RWLayout.Then(Tombstone), AbandonArgs{}, nil, lua("rw_lib"), lua("rw_abandon"))
	RWInspect = scriptOn(RWLayout, OwnerArgs{}, nil, lua("rw_lib"), lua("rw_inspect"))
)

// The scripts of each lock type, loaded together (a server missing one
// likely misses all): its acquire, then its others. Companions gives a
// script the first set that lists it; AnyLockLayout is their keys.
var lockTypeScripts = func() (sets [][]*redis.Script) {
	for _, acquire := range []*redis.Script{MutexAcquire, FairAcquire, SemAcquire, MultiAcquire, ElectionAcquire, RWAcquire} {
		sets = append(sets, append([]*redis.Script{acquire}, assembled[acquire].others...))
	}
	return sets
}()

// typeScripts are lockTypeScripts and the scripts for any type.
var typeScripts = append(lockTypeScripts[:len(lockTypeScripts):len(lockTypeScripts)], []*redis.Script{ForceUnlock}, []*redis.Script{Describe})

// Companions are the sources of the scripts to load when a server does not
// know s: its lock type's, s's among them. A script not made here has none.
func Companions(s *redis.Script) []string {
	for _, set := range typeScripts {
		if slices.Contains(set, s) {
			texts := make([]string, len(set))
			for i, c := range set {
				texts[i] = assembled[c].src
			}
			return texts
		}
	}
	return nil
}

// RightsKnown, as an acquire's last ARGV, tells rights_refused (common.lua)
// that the user's rights passed before: it checks nothing.
const RightsKnown = "rights-known"

// ReleaseMarkLife is how long a release's mark lasts (MARK_TTL), and
// TombstoneLife a tombstone (VOID_TTL): constants, not ARGV of each release.
const (
	ReleaseMarkLife = 5 * time.Second
	TombstoneLife   = time.Minute
)

// FenceRetentionTTLs is how long a fencing counter outlives the last token
// minted from it, in TTLs of its hold, so an unused name leaves no key. It
// keeps tokens rising while the server's clock is behind the last one; a
// Redlock's counters are kept for good. A power of ten: store_token
// (common.lua) multiplies a TTL by it by writing its zeros after it.
const FenceRetentionTTLs = 10
