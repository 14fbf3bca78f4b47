// Package family lists dlock's lock types once, for what goes over all of
// them: the CLI, dlocktest, the explorer and the tests. A new lock type is
// a line here; docs/ARCHITECTURE.md names the other files it touches.
package family

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
)

// Mode is how a kind's holds share a lock.
type Mode uint8

const (
	Exclusive Mode = iota // with nobody: a mutex's hold, a writer's, a leader's
	Shared                // with other Shared holds: a reader's
	Permit                // with other permits, up to their number
)

// Kind is one kind of hold: a lock type, or one side of an RWMutex.
type Kind struct {
	Kind    observe.Kind
	Type    string // the Go type: "RWMutex" for both sides
	Side    string // an RWMutex's: "read" or "write"
	Mode    Mode
	Group   bool // it takes several names at once (a MultiLock)
	Redlock bool // it runs on a Redlock's independent masters, not a Client's server

	// Takeover is the kind that takes its lock outright, as a second
	// process would after a loss: a writer for a reader, a Mutex for the
	// types whose lock is a Mutex's.
	Takeover observe.Kind

	Scripts Scripts
	handle  func(t Target, names []string, opts []dlock.Option) Taker
}

// Taker takes a hold of one handle: one attempt when try, else a wait.
type Taker func(ctx context.Context, try bool) (*dlock.Lease, error)

// Scripts are what a kind's holds run: the explorer and dlocktest tell its
// commands by them.
type Scripts struct {
	Acquire, Extend, Release, Abandon *redis.Script
}

// Target is where Take takes a hold, and with what.
type Target struct {
	Client  *dlock.Client
	Redlock *dlock.Redlock // for the kind whose Redlock is set
	Permits int            // a Semaphore's; Permits when 0
	Value   string         // a leader's; "candidate" when ""
}

// Permits is a Semaphore's number of permits when Target gives none.
const Permits = 2

// All are the kinds, in observe's order. The explorer draws from them in
// this order, and fixed seeds depend on it: add a kind at the end.
var All = []Kind{
	{Kind: observe.KindMutex, Type: "Mutex", Takeover: observe.KindMutex, Scripts: mutexScripts,
		handle: func(t Target, n []string, o []dlock.Option) Taker { return lockerTaker(t.Client.Mutex(n[0], o...)) }},
	{Kind: observe.KindReentrant, Type: "ReentrantMutex", Takeover: observe.KindReentrant, Scripts: rwScripts,
		handle: func(t Target, n []string, o []dlock.Option) Taker {
			return lockerTaker(t.Client.ReentrantMutex(n[0], o...))
		}},
	{Kind: observe.KindRead, Type: "RWMutex", Side: "read", Mode: Shared, Takeover: observe.KindWrite, Scripts: rwScripts,
		handle: func(t Target, n []string, o []dlock.Option) Taker {
			rw := t.Client.RWMutex(n[0], o...)
			return pick(rw.TryRLock, rw.RLock)
		}},
	{Kind: observe.KindWrite, Type: "RWMutex", Side: "write", Takeover: observe.KindWrite, Scripts: rwScripts,
		handle: func(t Target, n []string, o []dlock.Option) Taker { return lockerTaker(t.Client.RWMutex(n[0], o...)) }},
	{Kind: observe.KindFair, Type: "FairMutex", Takeover: observe.KindMutex,
		Scripts: Scripts{scripts.FairAcquire, scripts.MutexExtend, scripts.FairRelease, scripts.FairAbandon},
		handle:  func(t Target, n []string, o []dlock.Option) Taker { return lockerTaker(t.Client.FairMutex(n[0], o...)) }},
	{Kind: observe.KindSemaphore, Type: "Semaphore", Mode: Permit, Takeover: observe.KindSemaphore,
		Scripts: Scripts{scripts.SemAcquire, scripts.SemExtend, scripts.SemRelease, scripts.SemAbandon},
		handle: func(t Target, n []string, o []dlock.Option) Taker {
			sem := t.Client.Semaphore(n[0], cmp.Or(t.Permits, Permits), o...)
			return pick(sem.TryAcquire, sem.Acquire)
		}},
	{Kind: observe.KindMulti, Type: "MultiLock", Group: true, Takeover: observe.KindMutex,
		Scripts: Scripts{scripts.MultiAcquire, scripts.MultiExtend, scripts.MultiRelease, scripts.MultiAbandon},
		handle:  func(t Target, n []string, o []dlock.Option) Taker { return lockerTaker(t.Client.MultiLock(n, o...)) }},
	// A Campaign waits even for a Try: an Election has no TryCampaign.
	{Kind: observe.KindElection, Type: "Election", Takeover: observe.KindMutex,
		Scripts: Scripts{scripts.ElectionAcquire, scripts.MutexExtend, scripts.ElectionRelease, scripts.MutexAbandon},
		handle: func(t Target, n []string, o []dlock.Option) Taker {
			e, value := t.Client.Election(n[0], o...), cmp.Or(t.Value, "candidate")
			return func(ctx context.Context, _ bool) (*dlock.Lease, error) { return e.Campaign(ctx, value) }
		}},
	{Kind: observe.KindRedlock, Type: "RedlockMutex", Redlock: true, Takeover: observe.KindMutex, Scripts: mutexScripts,
		handle: func(t Target, n []string, o []dlock.Option) Taker { return lockerTaker(t.Redlock.Mutex(n[0], o...)) }},
}

var (
	mutexScripts = Scripts{scripts.MutexAcquire, scripts.MutexExtend, scripts.MutexRelease, scripts.MutexAbandon}
	rwScripts    = Scripts{scripts.RWAcquire, scripts.RWExtend, scripts.RWRelease, scripts.RWAbandon}
)

type locker interface {
	Lock(context.Context) (*dlock.Lease, error)
	TryLock(context.Context) (*dlock.Lease, error)
}

// lockerTaker is the Taker of a handle that has TryLock and Lock.
func lockerTaker(l locker) Taker { return pick(l.TryLock, l.Lock) }

// pick is the Taker of a handle's try and wait.
func pick(try, wait func(context.Context) (*dlock.Lease, error)) Taker {
	return func(ctx context.Context, once bool) (*dlock.Lease, error) {
		if once {
			return try(ctx)
		}
		return wait(ctx)
	}
}

// Label is what a tool calls k: its type, and an RWMutex's side.
func (k Kind) Label() string { return strings.TrimSpace(k.Type + " " + k.Side) }

// Handle makes a handle of k on names (one unless a Group) at t: its Taker.
func (k Kind) Handle(t Target, names []string, opts ...dlock.Option) Taker {
	return k.handle(t, names, opts)
}

// Take takes a hold of k on names with a new handle's Taker.
func (k Kind) Take(ctx context.Context, t Target, names []string, try bool, opts ...dlock.Option) (*dlock.Lease, error) {
	return k.handle(t, names, opts)(ctx, try)
}

// Of is the kind called kind; ok is false for none.
func Of(kind observe.Kind) (k Kind, ok bool) {
	i := slices.IndexFunc(All, func(k Kind) bool { return k.Kind == kind })
	if i < 0 {
		return Kind{}, false
	}
	return All[i], true
}

// MustOf is Of for a kind known to be one.
func MustOf(kind observe.Kind) Kind {
	k, ok := Of(kind)
	if !ok {
		panic("family: no kind " + string(kind))
	}
	return k
}

// Kinds are every kind's name, in All's order.
func Kinds() []string {
	names := make([]string, len(All))
	for i, k := range All {
		names[i] = string(k.Kind)
	}
	return names
}

// Types are the Go types of a Client's kinds, each once, in All's order.
func Types() []string {
	var types []string
	for _, k := range All {
		if !k.Redlock && !slices.Contains(types, k.Type) {
			types = append(types, k.Type)
		}
	}
	return types
}

// ScriptSet is the scripts role picks from every kind, each once.
func ScriptSet(role func(Scripts) *redis.Script) []*redis.Script {
	var set []*redis.Script
	for _, k := range All {
		if s := role(k.Scripts); !slices.Contains(set, s) {
			set = append(set, s)
		}
	}
	return set
}
