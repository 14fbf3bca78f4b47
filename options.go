package dlock

import (
	"cmp"
	"context"
	"log/slog"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Defaults and limits.
const (
	// DefaultPrefix starts every key and channel dlock writes.
	DefaultPrefix = "dlock:"

	// DefaultTTL is how long a lock outlives a holder that stopped renewing.
	DefaultTTL = 30 * time.Second

	// DefaultDriftFactor is the share of each TTL given up to clock drift.
	DefaultDriftFactor = 0.01

	// The TTL or lease time accepted. Up to MaxTTL, expiries in µs stay
	// exact as Lua numbers (below 2⁵³).
	MinTTL = 100 * time.Millisecond    // the shortest
	MaxTTL = 10 * 365 * 24 * time.Hour // the longest

	// DefaultWaiterRefresh is how often a waiting Lock tries again and
	// renews its registration: a dead waiter stops being picked within three.
	DefaultWaiterRefresh = time.Second
	MinWaiterRefresh     = 10 * time.Millisecond         // the shortest accepted
	MaxWaiterRefresh     = MaxTTL / waiterLeaseRefreshes // the longest: three refreshes within [MaxTTL]

	// MaxNameLen is the longest lock name accepted, in bytes.
	MaxNameLen = 1024

	// DefaultRestartGuard is a [Redlock] node's default [WithRestartGuard].
	DefaultRestartGuard = DefaultTTL

	// CleanupTimeout bounds the work that outlives a cancelled context:
	// Unlock, and the abandon after a failed acquire.
	CleanupTimeout = 5 * time.Second
)

// Option configures a Client (defaults for its locks) or one lock
// (overriding them). An option given where its doc says it does not apply
// is refused like a bad value: the first call's error matches [ErrInvalid].
type Option func(*settings)

// optionSet names the options not everything takes (WithPrefix has no bit).
type optionSet uint16

const (
	optOwner optionSet = 1 << iota
	optWaiterRefresh
	optHolderInfo
	optReplicaAck
	optNodeTimeout
	optRestartGuard
	optTTL
	optLeaseTime
	optDriftFactor
	optWait
	optLogger
	optObserver

	optEveryLock = optTTL | optLeaseTime | optDriftFactor | optWait | optLogger | optObserver
)

var optionNames = []string{"WithOwner", "WithWaiterRefresh", "WithHolderInfo", "WithReplicaAck", "WithNodeTimeout", "WithRestartGuard",
	"WithTTL", "WithLeaseTime", "WithDriftFactor", "WithWait", "WithLogger", "WithObserver"}

// optionScope is what one maker of locks takes of those options.
type optionScope struct {
	what  string
	takes optionSet
}

// The options each type takes; other types' are in their files.
var (
	forMutex     = optionScope{"Mutex", optEveryLock | optWaiterRefresh | optHolderInfo | optReplicaAck}
	forRWMutex   = optionScope{"RWMutex", forMutex.takes | optOwner}
	forReentrant = optionScope{"ReentrantMutex", forRWMutex.takes}
	forClient    = optionScope{"Client", forRWMutex.takes}
	forRedlock   = optionScope{"Redlock", optEveryLock | optNodeTimeout | optRestartGuard}
	forDescribe  = optionScope{"Describe or ForceUnlock", 0} // WithPrefix is all they use
)

// refuse is the error for the options of given that scope does not take.
func (scope optionScope) refuse(given optionSet) error {
	var names []string
	for i, name := range optionNames {
		if given&^scope.takes&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	if names == nil {
		return nil
	}
	return invalidf("%s does not apply to a %s", strings.Join(names, ", "), scope.what)
}

type settings struct {
	prefix    string
	ttl       time.Duration
	leaseTime time.Duration // > 0: fixed lease, no auto-renewal
	drift     float64
	wait      time.Duration
	waitSet   bool
	logger    *slog.Logger
	owner     string
	ownerSet  bool // else the context tells the owner (see holdLock.ownerFor)

	waiterRefresh time.Duration

	nodeTimeout  time.Duration // Redlock; 0: derived from the TTL
	restartGuard time.Duration // Redlock; 0: off

	ack replicaAck // replicas that must confirm what a lease counts on (WAIT)

	observer      *hooks // nil: nothing is observed
	holderInfo    string // encoded (see encodeHolderInfo); "" none
	holderInfoErr error  // what was wrong with WithHolderInfo's

	given optionSet // of the options only some types take, those given to this maker
}

func defaultSettings() settings {
	return settings{
		prefix: DefaultPrefix,
		ttl:    DefaultTTL,
		drift:  DefaultDriftFactor,
		logger: slog.New(errorsToDefault{}),

		waiterRefresh: DefaultWaiterRefresh,
		restartGuard:  DefaultRestartGuard,
	}
}

// WithPrefix sets the prefix of every key and channel (default
// [DefaultPrefix]), to keep applications on one Redis apart. It may not
// contain '{' or '}', which would change the keys' cluster slot.
func WithPrefix(prefix string) Option { return func(s *settings) { s.prefix = prefix } }

// WithTTL sets how long a lock outlives a holder that stops renewing it
// (default [DefaultTTL]). Leases are renewed automatically every TTL/3.
func WithTTL(ttl time.Duration) Option {
	return func(s *settings) { s.ttl, s.given = ttl, s.given|optTTL }
}

// WithLeaseTime makes each acquisition a fixed lease of d: it is not renewed,
// and ends d after it was taken unless extended with [Lease.Extend].
func WithLeaseTime(d time.Duration) Option {
	return func(s *settings) { s.leaseTime, s.given = d, s.given|optLeaseTime }
}

// WithDriftFactor sets the share of each TTL given up to clock drift, in
// [0, 0.5) (default [DefaultDriftFactor]).
func WithDriftFactor(f float64) Option {
	return func(s *settings) { s.drift, s.given = f, s.given|optDriftFactor }
}

// WithWait bounds how long Lock waits for the lock. WithWait(0) makes Lock a
// single attempt, like TryLock. Without it Lock waits until its context ends.
func WithWait(d time.Duration) Option {
	return func(s *settings) { s.wait, s.waitSet, s.given = d, true, s.given|optWait }
}

// WithLogger sets where dlock logs failed renewals, lost leases and broken
// subscriptions, never owner tokens; WithLogger(nil) logs nothing. Default:
// only error records (a node that can evict held locks), to [slog.Default].
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		s.logger, s.given = l, s.given|optLogger
	}
}

// errorsToDefault, the default logger's handler, passes only error records
// (locks are unsafe) to next, or to slog.Default()'s handler of the moment.
type errorsToDefault struct{ next slog.Handler }

func (h errorsToDefault) handler() slog.Handler { return cmp.Or(h.next, slog.Default().Handler()) }

func (h errorsToDefault) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelError && h.handler().Enabled(ctx, level)
}

func (h errorsToDefault) Handle(ctx context.Context, r slog.Record) error {
	return h.handler().Handle(ctx, r)
}

func (h errorsToDefault) WithAttrs(attrs []slog.Attr) slog.Handler {
	return errorsToDefault{h.handler().WithAttrs(attrs)}
}

func (h errorsToDefault) WithGroup(name string) slog.Handler {
	return errorsToDefault{h.handler().WithGroup(name)}
}

// WithOwner sets the owner id of a [ReentrantMutex] or [RWMutex] handle (or
// a Client's default): all calls with the id, in any process, are one owner,
// for holds shared across processes.
// Without it the owner is the call chain (see [Lease.Context]). Whoever
// knows the id joins its holds, so [Client.Describe] shows only its
// [admin.OwnerHash]. It must be printable UTF-8 of 1 to [MaxNameLen] bytes.
func WithOwner(id string) Option {
	return func(s *settings) { s.owner, s.ownerSet, s.given = id, true, s.given|optOwner }
}

// WithWaiterRefresh sets how often a waiting Lock tries again and renews
// its place among the waiters (default [DefaultWaiterRefresh]). A dead
// waiter woken or handed the lock holds the others up, for three refreshes
// at most. A [Redlock] refuses it: its waiters do not register.
func WithWaiterRefresh(d time.Duration) Option {
	return func(s *settings) { s.waiterRefresh, s.given = d, s.given|optWaiterRefresh }
}

// WithNodeTimeout bounds how long a [Redlock] waits for each node's answer.
// Keep it small against the TTL: a late answer uses up the lock's validity.
// Default: TTL/50, between 10 ms and 200 ms. Only a Redlock takes it.
func WithNodeTimeout(d time.Duration) Option {
	return func(s *settings) { s.nodeTimeout, s.given = d, s.given|optNodeTimeout }
}

// WithRestartGuard sets the restart guard of a [Redlock] (default
// [DefaultRestartGuard]): a node that lost writes could let a second owner
// in, so a node votes only once it has had its data (since its start, or a
// failover this process sees) for d, or the longest TTL the Redlock used.
// A node that is no master, or whose INFO cannot be read (+info), does not
// vote. Give d the longest TTL any process uses, at most [MaxTTL]. 0 turns
// it off: only for nodes that persist every write and are never failed over.
func WithRestartGuard(d time.Duration) Option {
	return func(s *settings) { s.restartGuard, s.given = d, s.given|optRestartGuard }
}

// WithReplicaAck makes every acquisition wait until n replicas confirm it,
// for at most timeout (WAIT); with fewer, the hold is released and the call
// fails with [ErrReplicaAck]. Renewals and [Lease.Extend] wait too. So a
// lock survives a failover to a replica that confirmed it; WAIT is not
// consensus. A [Redlock] refuses it. See docs/SAFETY.md.
func WithReplicaAck(n int, timeout time.Duration) Option {
	return func(s *settings) { s.ack, s.given = replicaAck{n, timeout}, s.given|optReplicaAck }
}

// with is s with opts applied.
func (s settings) with(opts []Option) settings {
	s.given = 0
	for _, opt := range opts {
		if opt != nil {
			opt(&s)
		}
	}
	return s
}

// validate checks s's values, and that scope takes every option given.
func (s settings) validate(scope optionScope) error {
	switch {
	case scope.refuse(s.given) != nil:
		return scope.refuse(s.given)
	case s.holderInfoErr != nil:
		return s.holderInfoErr
	case strings.ContainsAny(s.prefix, "{}"):
		return invalidf("prefix %q contains '{' or '}'", s.prefix)
	case validTTL("TTL", s.ttl) != nil:
		return validTTL("TTL", s.ttl)
	case s.leaseTime != 0 && validTTL("lease time", s.leaseTime) != nil:
		return validTTL("lease time", s.leaseTime)
	case !(s.drift >= 0 && s.drift < 0.5):
		return invalidf("drift factor %v is outside [0, 0.5)", s.drift)
	case s.waitSet && s.wait < 0:
		return invalidf("wait %v is negative", s.wait)
	case s.waiterRefresh < MinWaiterRefresh:
		return invalidf("waiter refresh %v is below the minimum %v", s.waiterRefresh, MinWaiterRefresh)
	case s.waiterRefresh > MaxWaiterRefresh:
		return invalidf("waiter refresh %v is above the maximum %v", s.waiterRefresh, MaxWaiterRefresh)
	case s.ack.n < 0:
		return invalidf("replica acknowledgements %d is negative", s.ack.n)
	case s.ack.n > 0 && s.ack.timeout <= 0:
		return invalidf("replica acknowledgement timeout %v is not positive", s.ack.timeout)
	case s.nodeTimeout < 0:
		return invalidf("node timeout %v is negative", s.nodeTimeout)
	case s.restartGuard < 0 || s.restartGuard > MaxTTL:
		return invalidf("restart guard %v is outside [0, %v]", s.restartGuard, MaxTTL)
	case s.ownerSet && s.owner == "":
		return invalidf("empty owner id")
	case len(s.owner) > MaxNameLen:
		return invalidf("owner id of %d bytes exceeds %d", len(s.owner), MaxNameLen)
	case !printableText(s.owner):
		// Operators' terminals show it (dlock status, ls, watch).
		return invalidf("owner id %q is not printable UTF-8", s.owner)
	}
	return nil
}

// holdTTL is the TTL each acquisition asks for, and whether it renews.
func (s settings) holdTTL() (ttl time.Duration, autoRenew bool) {
	if s.leaseTime > 0 {
		return s.leaseTime, false
	}
	return s.ttl, true
}

// validTTL checks a TTL, lease time or extension.
func validTTL(what string, d time.Duration) error {
	switch {
	case d < MinTTL:
		return invalidf("%s %v is below the minimum %v", what, d, MinTTL)
	case d > MaxTTL:
		return invalidf("%s %v is above the maximum %v", what, d, MaxTTL)
	}
	return nil
}

// printableText: valid UTF-8, printable runes and spaces (no bidi override).
func printableText(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0
}

func validateName(name string) error {
	switch {
	case name == "":
		return invalidf("empty lock name")
	case len(name) > MaxNameLen:
		return invalidf("lock name of %d bytes exceeds %d", len(name), MaxNameLen)
	case strings.ContainsAny(name, "{}"):
		// A brace could split one lock's keys over several slots.
		return invalidf("lock name %q contains '{' or '}'", name)
	}
	return nil
}
