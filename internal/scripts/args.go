package scripts

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Args is a script's ARGV: a struct's fields in order, named in Lua by their
// tags (argLocals). Append sends them but for the nil ones that end them (see
// Acquire for an acquire's). Callers box values, keeping those sent often.
type Args interface{ Append(argv []any) []any }

// Acquire is every acquire's ARGV after its type's fields always sent, then
// the rights flag. Empty ("" or nil) fields after HOLD_TTL that end ARGV are
// not sent (Redis grows ARGV at its 5th element) and read as "".
type Acquire struct {
	Owner     any `lua:"OWNER"`      // the call's owner token (a read-write hold's member)
	TTL       any `lua:"HOLD_TTL"`   // in milliseconds
	Waiter    any `lua:"WAITER"`     // registration when refused; "" for none
	WaiterTTL any `lua:"WAITER_TTL"` // how long a registration lasts, in milliseconds
}

// appendAcquire appends a's fields, then more (its type's others), without
// the empty ones that end them. WAITER_TTL is empty without a WAITER but for
// hint: an RWMutex's refusal reads it then (its retry hint).
func appendAcquire(argv []any, a Acquire, hint bool, more ...any) []any {
	if empty(a.Waiter) && !hint {
		a.WaiterTTL = ""
	}
	floor := len(argv) + 2 // OWNER and HOLD_TTL are always sent
	argv = append(append(argv, a.Owner, a.TTL, a.Waiter, a.WaiterTTL), more...)
	for len(argv) > floor && empty(argv[len(argv)-1]) {
		argv = argv[:len(argv)-1]
	}
	return argv
}

func empty(v any) bool { return v == nil || v == "" }

// AcquireReply reads an acquire's reply as its header's array ({1, token}:
// acquired; {0, ms}: refused; ...). It takes a grant sent as the token alone
// too (a table costs ~4,500 instructions more), and a null one, sent by none,
// as empty.
func AcquireReply(cmd *redis.Cmd) ([]int64, error) {
	if v, ok := cmd.Val().(int64); ok && cmd.Err() == nil {
		return []int64{1, v}, nil
	}
	if cmd.Val() == nil && cmd.Err() == redis.Nil {
		return nil, nil
	}
	return cmd.Int64Slice()
}

// MutexAcquireArgs are mutex_acquire.lua's.
type MutexAcquireArgs struct {
	Acquire
	Previous any `lua:"PREVIOUS"` // the call's previous registration
	Info     any `lua:"INFO"`     // holder info
}

func (a MutexAcquireArgs) Append(argv []any) []any {
	return appendAcquire(argv, a.Acquire, false, a.Previous, a.Info)
}

// FairAcquireArgs are fair_acquire.lua's.
type FairAcquireArgs struct {
	Publish any `lua:"PUBLISH"`
	Acquire
	Info any `lua:"INFO"`
}

func (a FairAcquireArgs) Append(argv []any) []any {
	return appendAcquire(append(argv, a.Publish), a.Acquire, false, a.Info)
}

// RWAcquireArgs are rw_acquire.lua's.
type RWAcquireArgs struct {
	TakenBy any `lua:"TAKEN_BY"` // the type taking a write hold
	Acquire
	Info any `lua:"INFO"`
}

func (a RWAcquireArgs) Append(argv []any) []any {
	return appendAcquire(append(argv, a.TakenBy), a.Acquire, true, a.Info)
}

// MultiAcquireArgs are multi_acquire.lua's.
type MultiAcquireArgs struct {
	Publish any `lua:"PUBLISH"`
	Acquire
	Watch any `lua:"WATCH"` // the lock (1-based) whose channel the waiter listens on
}

func (a MultiAcquireArgs) Append(argv []any) []any {
	if empty(a.Waiter) {
		a.Watch = "" // a waiter's
	}
	return appendAcquire(append(argv, a.Publish), a.Acquire, false, a.Watch)
}

// ElectionAcquireArgs are election_acquire.lua's.
type ElectionAcquireArgs struct {
	Value   any `lua:"VALUE"`
	Publish any `lua:"PUBLISH"`
	Acquire
}

func (a ElectionAcquireArgs) Append(argv []any) []any {
	return appendAcquire(append(argv, a.Value, a.Publish), a.Acquire, false)
}

// ExtendArgs are every extend script's (Info ignored without holder info).
type ExtendArgs struct {
	Owner   any `lua:"OWNER"`
	TTL     any `lua:"HOLD_TTL"`
	Shorten any `lua:"SHORTEN"`   // "1" from Lease.Extend: may shorten
	Info    any `lua:"WITH_INFO"` // "0" when the hold has no holder info
}

func (a ExtendArgs) Append(argv []any) []any {
	return appendSome(argv, a.Owner, a.TTL, a.Shorten, a.Info)
}

// OwnerArgs are the TTL scripts', RWInspect's and Describe's (its asker).
type OwnerArgs struct {
	Owner any `lua:"OWNER"`
}

func (a OwnerArgs) Append(argv []any) []any { return appendSome(argv, a.Owner) }

// ReleaseArgs are every release script's but a MultiLock's.
type ReleaseArgs struct {
	Owner   any `lua:"OWNER"`
	Publish any `lua:"PUBLISH"`
	Token   any `lua:"TOKEN"` // the hold's fencing token
	Info    any `lua:"WITH_INFO"`
}

func (a ReleaseArgs) Append(argv []any) []any {
	return appendSome(argv, a.Owner, a.Publish, a.Token, a.Info)
}

// MultiReleaseArgs are multi_release.lua's: ReleaseArgs' first two, then
// a token per lock. A list's local is the index of its first ARGV.
type MultiReleaseArgs struct {
	Owner   any      `lua:"OWNER"`
	Publish any      `lua:"PUBLISH"`
	Tokens  []uint64 `lua:"TOKENS_AT"`
}

func (a MultiReleaseArgs) Append(argv []any) []any {
	argv = appendSome(argv, a.Owner, a.Publish)
	for _, token := range a.Tokens {
		argv = append(argv, token)
	}
	return argv
}

// AbandonArgs are every abandon script's. Also is the type's own: a Mutex's
// registration before Waiter, or a MultiLock's lock (1-based) the waiter
// registered on.
type AbandonArgs struct {
	Owner   any `lua:"OWNER"` // of the attempt in doubt; "" when none is
	Publish any `lua:"PUBLISH"`
	Waiter  any `lua:"WAITER"` // registration to withdraw; "" when none
	Also    any `lua:"ALSO"`
}

func (a AbandonArgs) Append(argv []any) []any {
	return appendSome(argv, a.Owner, a.Publish, a.Waiter, a.Also)
}

// ProclaimArgs are election_proclaim.lua's.
type ProclaimArgs struct {
	Owner   any `lua:"OWNER"`
	Value   any `lua:"VALUE"`
	Publish any `lua:"PUBLISH"`
}

func (a ProclaimArgs) Append(argv []any) []any { return appendSome(argv, a.Owner, a.Value, a.Publish) }

// PublishArgs are force_unlock.lua's.
type PublishArgs struct {
	Publish any `lua:"PUBLISH"`
}

func (a PublishArgs) Append(argv []any) []any { return appendSome(argv, a.Publish) }

// FenceArgs are redlock_fence.lua's.
type FenceArgs struct {
	Token any `lua:"TOKEN"` // the quorum's token
}

func (a FenceArgs) Append(argv []any) []any { return appendSome(argv, a.Token) }

// NoArgs are the ARGV of a script that takes none (ElectionLeader).
type NoArgs struct{}

func (NoArgs) Append(argv []any) []any { return argv }

// appendSome appends args but for the nil ones that end them.
func appendSome(argv []any, args ...any) []any {
	for len(args) > 0 && args[len(args)-1] == nil {
		args = args[:len(args)-1]
	}
	return append(argv, args...)
}

// argNames are the Lua names of the fields of t (a struct above), in
// order, an embedded Acquire's in its place; unsent is the index of an
// acquire's first that may not be sent, the number of ARGV for others.
func argNames(t reflect.Type) (names []string, unsent int) {
	for _, f := range reflect.VisibleFields(t) {
		if !f.Anonymous {
			names = append(names, f.Tag.Get("lua"))
		}
	}
	if f, ok := t.FieldByName("Acquire"); ok && f.Anonymous {
		return names, slices.Index(names, "HOLD_TTL") + 1
	}
	return names, len(names)
}

// argLocals is the Lua that names args' ARGV, as Layout.locals names KEYS.
func argLocals(args any) string {
	t := reflect.TypeOf(args)
	names, unsent := argNames(t)
	if len(names) == 0 {
		return ""
	}
	argv := make([]string, len(names))
	for i := range names {
		k := strconv.Itoa(i + 1)
		switch {
		case i == len(names)-1 && t.Field(t.NumField()-1).Type.Kind() == reflect.Slice:
			argv[i] = k // a list's first index
		case i >= unsent: // the rights flag is the last: ARGV[k] is sent when before it
			argv[i] = "(" + k + " < #ARGV and ARGV[" + k + "] or '')"
		default:
			argv[i] = "ARGV[" + k + "]"
		}
	}
	return "local " + strings.Join(names, ", ") + " = " + strings.Join(argv, ", ") + "\n"
}

// Arg is the ARGV named lua (a tag above) in cmd, an FCALL or EVALSHA of a
// script here, for tests and the explorer; nil when cmd has none.
func Arg(cmd []any, lua string) any {
	if len(cmd) < 3 {
		return nil
	}
	script := Of(fmt.Sprint(cmd[1]))
	n, err := strconv.Atoi(fmt.Sprint(cmd[2]))
	if script == nil || err != nil || assembled[script].args == nil {
		return nil
	}
	names, unsent := argNames(reflect.TypeOf(assembled[script].args))
	i, end := slices.Index(names, lua), len(cmd)
	if i >= unsent {
		end-- // the rights flag
	}
	if i < 0 || end <= 3+n+i {
		return nil
	}
	return cmd[3+n+i]
}
