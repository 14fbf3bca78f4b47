package dlock

import (
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

	// DefaultTTL is how long a lock outlives a holder that stopped renewing
	// (crashed, partitioned). Auto-renewed locks are renewed every TTL/3.
	DefaultTTL = 30 * time.Second

	// DefaultDriftFactor is the share of each TTL a lease gives up to clock
	// rate differences between this process and Redis: a lease counts itself
	// lost at TTL × (1 − drift) after it was sent, before Redis lets go.
	DefaultDriftFactor = 0.01

	// MinTTL is the shortest TTL or lease time accepted. Below it, a network
	// round trip and the renewal schedule leave too little of the TTL to use.
	MinTTL = 100 * time.Millisecond

	// MaxTTL is the longest TTL or lease time accepted. The scripts keep
	// expiries in microseconds of the server's clock as Lua numbers, exact
	// below 2⁵³ µs (285 years since 1970); this bound keeps every expiry far
	// inside that and every PX argument inside what Redis takes.
	MaxTTL = 10 * 365 * 24 * time.Hour

	// DefaultWaiterRefresh is how often a waiting Lock, registered to be
	// woken by the next release, tries again and so renews its
	// registration: a waiter that died stops being picked within a few
	// refreshes, and a wake-up sent to it holds the others up for one
	// refresh at most.
	DefaultWaiterRefresh = time.Second

	// MinWaiterRefresh is the shortest waiter refresh accepted: each refresh
	// of each waiter is a command sent to Redis.
	MinWaiterRefresh = 10 * time.Millisecond

	// MaxWaiterRefresh is the longest waiter refresh accepted. A waiter's
	// registration lasts three refreshes, an expiry the scripts keep like a
	// hold's: this bound keeps it within [MaxTTL], and so exact in Lua and
	// a valid expiry in Redis (longer, it would overflow, and a negative
	// expiry deletes the set of waiters).
	MaxWaiterRefresh = MaxTTL / waiterLeaseRefreshes

	// MaxNameLen is the longest lock name accepted, in bytes.
	MaxNameLen = 1024

	// DefaultRestartGuard is how long a [Redlock] node must have been up
	// before it votes, unless [WithRestartGuard] says otherwise (or the
	// Redlock uses a longer TTL): the default TTL, the longest TTL of any
	// client that does not set one.
	DefaultRestartGuard = DefaultTTL

	// CleanupTimeout bounds the work dlock does after its caller has given
	// up: the compare-and-delete that follows a failed or cancelled acquire,
	// and Unlock, which releases even with a cancelled context. It bounds
	// them whatever the context, one that never ends included.
	CleanupTimeout = 5 * time.Second
)

// Option configures a Client (as defaults for every lock it makes) or one
// lock (overriding the Client's). An option that does not apply where it is
// given (WithReplicaAck to a Redlock, WithOwner to a Mutex…; each option's
// doc says where it applies) is refused like a bad value: the first call
// returns an error matching [ErrInvalid], before anything is sent. A
// Client takes every option that applies to a lock type it makes.
type Option func(*settings)

// optionSet names the options that not everything takes: some only some
// lock types, the rest every lock type but not Describe nor ForceUnlock,
// which look a lock up by name (WithPrefix, which everything takes, has no
// bit).
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

// optionScope is what one maker of locks takes of the options that not
// everything takes.
type optionScope struct {
	what  string
	takes optionSet
}

// The options each type takes: a Redlock's nodes are independent masters
// (no replicas to wait for) and nobody waits on them as a registered
// waiter; a MultiLock's locks and an Election's leadership keep no holder
// info; only read-write and reentrant holds have an owner beyond the call.
var (
	forMutex     = optionScope{"Mutex", optEveryLock | optWaiterRefresh | optHolderInfo | optReplicaAck}
	forFair      = optionScope{"FairMutex", forMutex.takes}
	forSemaphore = optionScope{"Semaphore", forMutex.takes}
	forRWMutex   = optionScope{"RWMutex", forMutex.takes | optOwner}
	forReentrant = optionScope{"ReentrantMutex", forRWMutex.takes}
	forMulti     = optionScope{"MultiLock", optEveryLock | optWaiterRefresh | optReplicaAck}
	forElection  = optionScope{"Election", optEveryLock | optWaiterRefresh | optReplicaAck}
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

// WithPrefix sets the prefix of every key and channel (default [DefaultPrefix]).
// Point several applications at one Redis with different prefixes to keep
// their locks apart. It may not contain '{' or '}', which would change the
// cluster slot of the keys.
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
// [0, 0.5) (default [DefaultDriftFactor]): every lease of every type counts
// itself lost that much before Redis lets go.
func WithDriftFactor(f float64) Option {
	return func(s *settings) { s.drift, s.given = f, s.given|optDriftFactor }
}

// WithWait bounds how long Lock waits for the lock. WithWait(0) makes Lock a
// single attempt, like TryLock. Without it Lock waits until its context ends.
func WithWait(d time.Duration) Option {
	return func(s *settings) { s.wait, s.waitSet, s.given = d, true, s.given|optWait }
}

// WithLogger sets where dlock logs renewals that failed, leases that were
// lost and subscriptions that broke. Owner tokens never appear there.
// Default: only what is logged at error level, a Redis node that can evict
// held locks, goes to [slog.Default]; WithLogger(nil) logs nothing.
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		s.logger, s.given = l, s.given|optLogger
	}
}

// errorsToDefault is the default logger's handler: a warning that the
// locks are unsafe (error level) must reach someone without configuration,
// so it passes records at error level to next, or to slog.Default()'s
// handler as it is at each record, and drops the rest.
type errorsToDefault struct{ next slog.Handler }

func (h errorsToDefault) handler() slog.Handler {
	if h.next != nil {
		return h.next
	}
	return slog.Default().Handler()
}

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

// WithOwner sets the owner id of a [ReentrantMutex] or [RWMutex] handle:
// every call through it, whatever its context, and every handle with the
// same id, in any process, is one owner, re-entering the others' holds. It
// is for holds shared across processes, not for goroutines. Without it the
// owner is the call chain (see [Lease.Context]). Whoever knows the id joins
// its holds, write holds with their fencing token: [Client.Describe] shows
// only its [admin.OwnerHash], which hides an id that cannot be guessed. It must
// be printable UTF-8, not empty, and at most [MaxNameLen] bytes. Only an
// RWMutex and a ReentrantMutex (or a Client, as their default) take it.
func WithOwner(id string) Option {
	return func(s *settings) {
		s.owner = id
		s.ownerSet = true
		s.given |= optOwner
	}
}

// WithWaiterRefresh sets how often a waiting Lock renews its place among the
// waiters (default [DefaultWaiterRefresh]). A waiter that dies is dropped
// within three refreshes; until then a wake-up or, for a [FairMutex], the
// lock itself may be handed to it and held up for that long. Shorter
// refreshes drop dead waiters sooner at the cost of one Redis command per
// waiter per refresh; at least [MinWaiterRefresh], at most
// [MaxWaiterRefresh]. A [Redlock] refuses it: its waiters do not register,
// they try again after a random delay.
func WithWaiterRefresh(d time.Duration) Option {
	return func(s *settings) { s.waiterRefresh, s.given = d, s.given|optWaiterRefresh }
}

// WithNodeTimeout bounds how long a [Redlock] waits for each node's answer,
// in every operation. It must be small against the TTL: a node that
// answers late uses up the validity of the lock. Default: TTL/50, between
// 10 ms and 200 ms. Only a Redlock takes it.
func WithNodeTimeout(d time.Duration) Option {
	return func(s *settings) { s.nodeTimeout, s.given = d, s.given|optNodeTimeout }
}

// WithRestartGuard sets the restart guard of a [Redlock]: a node votes only
// once it has had its data for at least d, or for the longest TTL the
// Redlock has used, whichever is longer (default [DefaultRestartGuard]): a
// node that lost writes (a restart without persistence, a failover to a
// replica that missed them) could let a second owner in. That time counts
// from the node's start (its uptime: a new deployment waits too), or from
// when this process sees a master other than the one it saw behind the
// client, or first meets one promoted since it started. A node that is not
// a master, or whose INFO cannot be read (+info), does not vote; its
// [NodeError] says why. Give d the longest TTL any process uses.
// WithRestartGuard(0) turns it off: only for nodes that persist every
// write (appendfsync always) and are never failed over.
func WithRestartGuard(d time.Duration) Option {
	return func(s *settings) { s.restartGuard, s.given = d, s.given|optRestartGuard }
}

// WithReplicaAck makes every acquisition wait until n replicas of the
// lock's master confirm it, for at most timeout (WAIT, in the same
// pipeline); with fewer, the hold is released and the call fails with
// [ErrReplicaAck]. Renewals and [Lease.Extend] wait too, and a lease's
// deadline moves only with what the replicas confirmed. So a lock survives
// the failover of its master to a replica that confirmed it. WAIT is not
// consensus: a replica outside the n may still be promoted. A [Redlock]
// refuses it. Details in docs/SAFETY.md ("Contracts in detail").
func WithReplicaAck(n int, timeout time.Duration) Option {
	return func(s *settings) { s.ack, s.given = replicaAck{n, timeout}, s.given|optReplicaAck }
}

// with is s with opts applied; given says which of them only some types
// take.
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

// triesOnce reports whether a Lock made with these settings is a single
// attempt ([WithWait](0)), for observers.
func (s settings) triesOnce() bool { return s.waitSet && s.wait == 0 }

// holdTTL is the TTL each acquisition asks Redis for, and whether the lease
// renews itself.
func (s settings) holdTTL() (ttl time.Duration, autoRenew bool) {
	if s.leaseTime > 0 {
		return s.leaseTime, false
	}
	return s.ttl, true
}

// validTTL checks a TTL, lease time or extension against [MinTTL] and
// [MaxTTL].
func validTTL(what string, d time.Duration) error {
	switch {
	case d < MinTTL:
		return invalidf("%s %v is below the minimum %v", what, d, MinTTL)
	case d > MaxTTL:
		return invalidf("%s %v is above the maximum %v", what, d, MaxTTL)
	}
	return nil
}

// printableText says whether s is valid UTF-8 of printable runes only,
// spaces included (no control character, no bidi override).
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
		// The name becomes a cluster hash tag; a brace in it could split one
		// lock's keys over several slots.
		return invalidf("lock name %q contains '{' or '}'", name)
	}
	return nil
}
