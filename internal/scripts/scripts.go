// Package scripts holds the Lua scripts dlock runs in Redis, one file per
// operation. Each file's header states its KEYS, ARGV and return values.
// The KEYS of each script are in the order of its Layout (layout.go),
// which names them in Lua (scriptOn) and makes them in Go (LayoutOf).
//
// The scripts are also the functions of one Redis Functions library
// (Library, library.go), which dlock calls by FCALL: a server without it
// is sent it, and the call again, in one round trip. Where Functions are
// refused, scripts run by SHA (EVALSHA), and a server that answers
// NOSCRIPT is sent the script's companions (see Companions). dlock's
// evalsha.go does both, in one place.
//
// Redis scripts cannot import one another, so what several scripts share is
// prepended to them here, each script getting only the helpers it calls
// (assemble.go): common.lua (the server's clock, expiring sorted sets,
// waiter registration) and foreign.lua (how dlock's own keys are
// recognised) to every script, hand_next.lua to the Mutex and MultiLock
// scripts that free a lock, wake_next.lua to the others that do,
// fair_lib.lua (a FairMutex's queue) to the FairMutex scripts, sem_lib.lua
// to the Semaphore scripts, multi_lib.lua to the MultiLock scripts,
// rw_lib.lua (the state of a read-write lock) to every RWMutex script and to
// those that work on any lock.
package scripts

import (
	_ "embed"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed common.lua
	common string
	//go:embed foreign.lua
	foreign string
	//go:embed wake_next.lua
	wakeNext string
	//go:embed hand_next.lua
	handNext string
	//go:embed mutex_acquire.lua
	mutexAcquire string
	//go:embed mutex_release.lua
	mutexRelease string
	//go:embed mutex_extend.lua
	mutexExtend string
	//go:embed mutex_ttl.lua
	mutexTTL string
	//go:embed mutex_abandon.lua
	mutexAbandon string
	//go:embed force_unlock.lua
	forceUnlock string
	//go:embed describe.lua
	describe string

	//go:embed fair_lib.lua
	fairLib string
	//go:embed fair_acquire.lua
	fairAcquire string
	//go:embed fair_release.lua
	fairRelease string
	//go:embed fair_abandon.lua
	fairAbandon string

	//go:embed sem_lib.lua
	semLib string
	//go:embed sem_acquire.lua
	semAcquire string
	//go:embed sem_release.lua
	semRelease string
	//go:embed sem_extend.lua
	semExtend string
	//go:embed sem_ttl.lua
	semTTL string
	//go:embed sem_abandon.lua
	semAbandon string
	//go:embed sem_set_permits.lua
	semSetPermits string

	//go:embed multi_lib.lua
	multiLib string
	//go:embed multi_acquire.lua
	multiAcquire string
	//go:embed multi_release.lua
	multiRelease string
	//go:embed multi_extend.lua
	multiExtend string
	//go:embed multi_ttl.lua
	multiTTL string
	//go:embed multi_abandon.lua
	multiAbandon string

	//go:embed election_acquire.lua
	electionAcquire string
	//go:embed election_release.lua
	electionRelease string
	//go:embed election_proclaim.lua
	electionProclaim string
	//go:embed election_leader.lua
	electionLeader string

	//go:embed redlock_fence.lua
	redlockFence string

	//go:embed rw_lib.lua
	rwLib string
	//go:embed rw_acquire.lua
	rwAcquire string
	//go:embed rw_release.lua
	rwRelease string
	//go:embed rw_extend.lua
	rwExtend string
	//go:embed rw_ttl.lua
	rwTTL string
	//go:embed rw_abandon.lua
	rwAbandon string
	//go:embed rw_inspect.lua
	rwInspect string
)

// OwnerTokenDigits is the length of an owner token, in lowercase hex
// digits: the value a Mutex's lock key holds. The scripts take a string of
// another form under that key for a value dlock did not write.
const OwnerTokenDigits = 32

// ClientTagChars is the length of a Client's tag (see ProtocolTag), which
// starts its waiters' registrations and names its own channel: the
// scripts find the tag as that many characters before a registration's
// '/'.
const ClientTagChars = 16

// ProtocolVersion is the version of what dlock's scripts share in Redis
// between clients: the forms of registrations, hand-over messages and lock
// values. Protocol 1 is dlock before it was versioned; protocol 2 reads its
// registrations and hand-overs. A Client's tag (see ProtocolTag) carries
// the version, so that a script tells a registration of a protocol it does
// not read, and wakes its waiter rather than hand it a lock or publish
// what it registered. docs/ARCHITECTURE.md says what may change between
// versions and how a deployment upgrades.
const ProtocolVersion = 2

// ProtocolTag starts the tag of every Client of this protocol ('v' and
// the version): the scripts read it in registrations (registration_parts
// in common.lua).
var ProtocolTag = "v" + strconv.Itoa(ProtocolVersion)

// prelude starts every script: the constants the scripts take from Go (the
// owner token's form and length, made from OwnerTokenDigits; the protocol's
// tag and a Client tag's length; the fencing counter's retention), so that
// each rule is written once, then common.lua and foreign.lua.
var prelude = fmt.Sprintf("local OWNER_TOKEN = '^%s$'\n", strings.Repeat("[0-9a-f]", OwnerTokenDigits)) +
	"local PROTOCOL_TAG = '" + ProtocolTag + "'\n" +
	fmt.Sprintf("local OWNER_TOKEN_DIGITS = %d\n", OwnerTokenDigits) +
	fmt.Sprintf("local CLIENT_TAG_CHARS = %d\n", ClientTagChars) +
	fmt.Sprintf("local HOLDER_INFO = '^%s{'\n", strings.Repeat("[0-9a-f]", OwnerTokenDigits)) +
	"local FENCE_RETENTION_TTLS = " + strconv.Itoa(FenceRetentionTTLs) + "\n" +
	"local RIGHTS_KNOWN = '" + RightsKnown + "'\n" +
	common + foreign

// script makes a script of parts, after the prelude, with only the helpers
// of the prelude and libraries that it calls (see assemble): Redis runs a
// script's whole text at every call, and each function defined costs then.
// An acquire's rights_refused checks the commands it runs and those of
// others (see rightsFor).
func script(others []*redis.Script, parts ...string) *redis.Script {
	segs := assembleSegments(append([]string{prelude}, parts...))
	rights := rightsFor(joined(segs), others)
	src := strings.Replace(joined(segs), rightsList, rights, 1)
	s := redis.NewScript(src)
	sources[s] = src
	assembled[s] = assembly{segs, rights, others != nil, readsOnly(src)}
	return s
}

// readsOnly tells a script that writes nothing: its function is flagged
// no-writes, which spares it the checks a write gets (a replica's
// READONLY, min-replicas-to-write, a failing save), as an EVALSHA script
// that writes nothing was. A command named by a variable may write.
func readsOnly(src string) bool {
	for line := range strings.SplitSeq(src, "\n") {
		if variableCommand.MatchString(uncommented(line)) {
			return false
		}
	}
	for _, name := range commandsRun(src) {
		if !readCommands[name] {
			return false
		}
	}
	return true
}

// variableCommand finds a command named by a variable (PUBLISH's, which
// may be SPUBLISH); call_or_wrongtype and call_on pass theirs on.
var variableCommand = regexp.MustCompile(`redis\.p?call\([A-Za-z]`)

// readCommands are the commands dlock's scripts run that write nothing.
var readCommands = map[string]bool{
	"exists": true, "get": true, "hget": true, "hgetall": true, "hlen": true, "pttl": true,
	"hmget": true, "time": true, "type": true, "zcard": true, "zcount": true, "zrange": true, "zrangebyscore": true, "zscore": true,
}

// sources are the scripts' texts, for SCRIPT LOAD in a pipeline: a
// [redis.Script] keeps its own to itself, and its Load, sent in a pipeline,
// sets its SHA to the empty reply of a command not sent yet.
var sources = make(map[*redis.Script]string)

// scriptOn makes a script of parts that take the KEYS of layout, named
// after the prelude.
func scriptOn(layout Layout, parts ...string) *redis.Script {
	return acquireOn(layout, nil, parts...)
}

// acquireOn is scriptOn for a lock type's acquire: others are the type's
// scripts its leases run later, whose commands it checks the rights of.
func acquireOn(layout Layout, others []*redis.Script, parts ...string) *redis.Script {
	s := script(others, append([]string{layout.locals()}, parts...)...)
	layouts[s] = layout
	return s
}

// scriptOnParts makes a script of parts that take the KEYS of a MultiLock
// group: a part per lock, then tail (see partLocals); others as for
// acquireOn.
func scriptOnParts(part, tail Layout, others []*redis.Script, parts ...string) *redis.Script {
	s := script(others, append([]string{partLocals(part, tail)}, parts...)...)
	layouts[s] = part.Then(tail...)
	return s
}

// rightsList is the list of commands rights_refused (common.lua) checks,
// as written there, for rightsFor to fill.
const rightsList = "local SCRIPT_COMMANDS = {}"

// scriptCommand finds a command a script runs on keys, by its name in
// redis.call, call_or_wrongtype (common.lua) or call_on (foreign.lua).
// Only PUBLISH goes by a variable (it may be SPUBLISH), on a channel, not a
// key.
var scriptCommand = regexp.MustCompile(`(?:redis\.p?call\(|call_or_wrongtype\(|call_on\([^,]+, )'([A-Z]+)'`)

// rightsFor is rights_refused's list filled for src, where src has it: the
// commands src and others run on keys. A lease runs its type's other
// scripts after the acquire, and Redis does not undo a script's writes
// when a later command in it is refused: checked at the acquire, a missing
// right refuses the lock before anything is written. Checking only the
// type's commands, not every script's, spares a restricted user's acquire
// the checks of the others.
func rightsFor(src string, others []*redis.Script) string {
	if !strings.Contains(src, rightsList) {
		return rightsList
	}
	names := commandsRun(src)
	for _, other := range others {
		names = append(names, commandsRun(sources[other])...)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	return "local SCRIPT_COMMANDS = {'" + strings.Join(names, "', '") + "'}"
}

// commandsRun are the commands src runs on keys, in lowercase, as ACL
// names them.
func commandsRun(src string) []string {
	var names []string
	for line := range strings.SplitSeq(src, "\n") {
		for _, m := range scriptCommand.FindAllStringSubmatch(uncommented(line), -1) {
			names = append(names, strings.ToLower(m[1]))
		}
	}
	return names
}

// layouts are the scripts' layouts, for LayoutOf.
var layouts = make(map[*redis.Script]Layout)

// LayoutOf is the layout of the KEYS s takes, which Go makes s's keys by;
// for a script on parts (a MultiLock's), those of a group of one lock: its
// part, then the tail. A script not made here has none.
func LayoutOf(s *redis.Script) Layout {
	return layouts[s]
}

// Mutex scripts.
var (
	MutexAcquire = acquireOn(MutexAcquireLayout, []*redis.Script{MutexRelease, MutexExtend, MutexTTL, MutexAbandon, RedlockFence}, mutexAcquire)
	MutexRelease = scriptOn(MutexReleaseLayout, handNext, mutexRelease)
	MutexExtend  = scriptOn(MutexExtendLayout, mutexExtend)
	MutexTTL     = scriptOn(MutexExtendLayout, mutexTTL)
	MutexAbandon = scriptOn(MutexAbandonLayout, handNext, mutexAbandon)
)

// FairMutex scripts. A FairMutex's lock key is a Mutex's, so it renews and
// inspects its holds with MutexExtend and MutexTTL.
var (
	FairAcquire = acquireOn(FairLayout.Then(Tombstone), []*redis.Script{FairRelease, FairAbandon, MutexExtend, MutexTTL}, fairLib, fairAcquire)
	FairRelease = scriptOn(FairLayout.Then(ReleaseMark, Tombstone), fairLib, fairRelease)
	FairAbandon = scriptOn(FairLayout.Then(Tombstone), fairLib, fairAbandon)
)

// Semaphore scripts.
var (
	SemAcquire    = acquireOn(SemLayout.Then(Tombstone), []*redis.Script{SemRelease, SemExtend, SemTTL, SemAbandon, SemSetPermits}, semLib, semAcquire)
	SemRelease    = scriptOn(SemLayout.Before("FENCE").Then(ReleaseMark, Tombstone), wakeNext, semLib, semRelease)
	SemExtend     = scriptOn(SemLayout, semLib, semExtend)
	SemTTL        = scriptOn(SemLayout, semLib, semTTL)
	SemAbandon    = scriptOn(SemLayout.Then(Tombstone), wakeNext, semLib, semAbandon)
	SemSetPermits = scriptOn(SemLayout, semLib, semSetPermits)
)

// MultiLock scripts, for a group of Mutex locks in one slot.
var (
	MultiAcquire = scriptOnParts(MultiPartLayout, Layout{Tombstone}, []*redis.Script{MultiRelease, MultiExtend, MultiTTL, MultiAbandon}, handNext, multiLib, multiAcquire)
	MultiRelease = scriptOnParts(MultiPartLayout, Layout{ReleaseMark, Tombstone}, nil, handNext, multiLib, multiRelease)
	MultiExtend  = scriptOnParts(MultiPartLayout, nil, nil, multiLib, multiExtend)
	MultiTTL     = scriptOnParts(MultiPartLayout, nil, nil, multiLib, multiTTL)
	MultiAbandon = scriptOnParts(MultiPartLayout, Layout{Tombstone}, nil, handNext, multiLib, multiAbandon)
)

// Election scripts. A leadership is a Mutex hold: it is renewed with
// MutexExtend and MutexTTL and given up in doubt with MutexAbandon.
var (
	ElectionAcquire  = acquireOn(ElectionAcquireLayout, []*redis.Script{ElectionRelease, ElectionProclaim, ElectionLeader, MutexExtend, MutexTTL, MutexAbandon}, electionAcquire)
	ElectionRelease  = scriptOn(ElectionReleaseLayout, wakeNext, electionRelease)
	ElectionProclaim = scriptOn(ElectionProclaimLayout, electionProclaim)
	ElectionLeader   = scriptOn(ElectionProclaimLayout, electionLeader)
)

// RedlockFence raises a node's fencing counter to a quorum's token. A
// Redlock takes, renews and releases its holds on each node with the Mutex
// scripts.
var RedlockFence = scriptOn(RedlockFenceLayout, redlockFence)

// Scripts for any type of lock, on the KEYS of AnyLockLayout.
var (
	ForceUnlock = scriptOn(AnyLockLayout, rwLib, forceUnlock)
	Describe    = scriptOn(AnyLockLayout, rwLib, describe)
)

// RWMutex scripts, also those of ReentrantMutex: its holds are write holds.
// A release takes its mark in the fencing counter's place.
var (
	RWAcquire = acquireOn(RWLayout.Then(Tombstone), []*redis.Script{RWRelease, RWExtend, RWTTL, RWAbandon, RWInspect}, rwLib, rwAcquire)
	RWRelease = scriptOn(RWLayout.Before("FENCE").Then(ReleaseMark, Tombstone), rwLib, rwRelease)
	RWExtend  = scriptOn(RWLayout, rwLib, rwExtend)
	RWTTL     = scriptOn(RWLayout, rwLib, rwTTL)
	RWAbandon = scriptOn(RWLayout.Then(Tombstone), rwLib, rwAbandon)
	RWInspect = scriptOn(RWLayout, rwLib, rwInspect)
)

// The scripts of each lock type, its own and those it borrows: a server that
// does not know one of them (a cold, restarted or flushed one) likely knows
// none, and the type's next call sends another, so they are loaded
// together. A script borrowed by another type is listed under its own
// type first, and that is the set Companions gives for it.
var typeScripts = [][]*redis.Script{
	{MutexAcquire, MutexRelease, MutexExtend, MutexTTL, MutexAbandon, RedlockFence}, // a Redlock's too
	{FairAcquire, FairRelease, FairAbandon, MutexExtend, MutexTTL},
	{SemAcquire, SemRelease, SemExtend, SemTTL, SemAbandon, SemSetPermits},
	{MultiAcquire, MultiRelease, MultiExtend, MultiTTL, MultiAbandon},
	{ElectionAcquire, ElectionRelease, ElectionProclaim, ElectionLeader, MutexExtend, MutexTTL, MutexAbandon},
	{RWAcquire, RWRelease, RWExtend, RWTTL, RWAbandon, RWInspect},
	{ForceUnlock},
	{Describe},
}

var companions = companionsOf(typeScripts)

// companionsOf maps each script to the sources of the first set that
// lists it.
func companionsOf(sets [][]*redis.Script) map[*redis.Script][]string {
	of := make(map[*redis.Script][]string)
	for _, set := range sets {
		texts := make([]string, len(set))
		for i, s := range set {
			texts[i] = sources[s]
		}
		for _, s := range set {
			if of[s] == nil {
				of[s] = texts
			}
		}
	}
	return of
}

// Companions are the sources of the scripts to load, s's among them, when
// a server does not know s: those of s's lock type. A script not made
// here (a test's own) has none.
func Companions(s *redis.Script) []string {
	return companions[s]
}

// RightsKnown, as an acquire's last ARGV, tells its rights_refused
// (common.lua) that the Client has seen the user's rights pass it on this
// server, so that it checks nothing.
const RightsKnown = "rights-known"

// FenceRetentionTTLs is how long a lock name's fencing counter outlives the
// last token minted from it, in TTLs of the hold that token went to, so a
// name no longer used leaves no key behind. Tokens do not need the counter
// to go up (see dlock.Lease.Token); it keeps them going up while the
// server's clock is behind the last token. A Redlock's counters are kept
// for good (redlock_fence.lua). mint_token in common.lua has it from here.
const FenceRetentionTTLs = 10
