package scripts

import "github.com/redis/go-redis/v9"

// A Semaphore's layout, ARGV and scripts: all of a lock type's Go here
// but its line in lockTypeScripts (scripts.go).

// What follows a Semaphore's key in the names of its other keys.
const (
	TokensSuffix  = ":tokens"  // its holders' tokens and info
	PermitsSuffix = ":permits" // its number of permits
)

// SemLayout is the KEYS of the Semaphore scripts (see sem_lib.lua), before
// the call's and the hold's own; each takes as many as it uses.
var SemLayout = Layout{{Lua: "HOLDERS", Form: FormLock}, {Lua: "TOKENS", Suffix: TokensSuffix, Form: FormHash},
	{Lua: "PERMITS", Suffix: PermitsSuffix, Form: FormNumber}, keyWaiters, keyChannel, keyFence}

// SemAcquireArgs are sem_acquire.lua's.
type SemAcquireArgs struct {
	Permits any `lua:"EXPECTED"` // the number of permits the caller expects
	Acquire
	Info any `lua:"INFO"`
}

func (a SemAcquireArgs) Append(argv []any) []any {
	return appendAcquire(append(argv, a.Permits), a.Acquire, false, a.Info)
}

// SetPermitsArgs are sem_set_permits.lua's.
type SetPermitsArgs struct {
	Permits any `lua:"COUNT"`
	Publish any `lua:"PUBLISH"`
	TTL     any `lua:"HOLD_TTL"` // the handle's, in ms
}

func (a SetPermitsArgs) Append(argv []any) []any {
	return appendSome(argv, a.Permits, a.Publish, a.TTL)
}

// Semaphore scripts.
var (
	SemAcquire    = scriptOn(SemLayout.Before("CHANNEL").Then(keyFence, Tombstone), SemAcquireArgs{}, []*redis.Script{SemRelease, SemExtend, SemTTL, SemAbandon, SemSetPermits}, lua("sem_lib"), lua("sem_acquire"))
	SemRelease    = scriptOn(SemLayout.Before("FENCE").Then(ReleaseMark, Tombstone), ReleaseArgs{}, nil, lua("wake_next"), lua("sem_lib"), lua("sem_release"))
	SemExtend     = scriptOn(SemLayout, ExtendArgs{}, nil, lua("sem_lib"), lua("sem_extend"))
	SemTTL        = scriptOn(SemLayout, OwnerArgs{}, nil, lua("sem_lib"), lua("sem_ttl"))
	SemAbandon    = scriptOn(SemLayout.Then(Tombstone), AbandonArgs{}, nil, lua("wake_next"), lua("sem_lib"), lua("sem_abandon"))
	SemSetPermits = scriptOn(SemLayout, SetPermitsArgs{}, nil, lua("sem_lib"), lua("sem_set_permits"))
)
