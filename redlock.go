package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/clock"
	"github.com/dlockio/dlock/internal/dialwatch"
	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
)

// Redlock makes locks held by a majority of independent Redis masters (the
// Redlock algorithm), so a lock survives the loss of a minority. Each node
// is one master's client, whose restarts the restart guard counts
// ([WithRestartGuard]). Each operation goes to every node at once, bounded
// by [WithNodeTimeout]; failures are a [*QuorumError] naming each node.
// What it promises, and what can still let two owners in: docs/SAFETY.md.
type Redlock struct {
	nodes   []*redlockNode
	cfg     settings
	quorum  int
	mu      sync.Mutex
	longest time.Duration // the longest TTL used, for the restart guard; under mu
	clock   *clock.Clock  // what its leases read the time from; nil: the machine's (see Client.clock)
}

// NewRedlock returns a Redlock over the masters clients reach: an odd
// number, at least 3, none a Ring or ClusterClient. Options set its locks'
// defaults. It sends Redis nothing; bad arguments fail with [ErrInvalid].
func NewRedlock(clients []redis.UniversalClient, opts ...Option) (*Redlock, error) {
	r := &Redlock{cfg: defaultSettings().with(opts), quorum: len(clients)/2 + 1}
	for i, rdb := range clients {
		if _, made := resendAfter(rdb); !made {
			return nil, invalidf("Redis client %d is nil", i)
		}
		if fcall.Routed(rdb) { // its connections are unseen by the restart guard's hook
			return nil, invalidf("Redis client %d is a %T: a Redlock node must be one master's client (a Client or a failover client), whose reconnections the restart guard can count", i, rdb)
		}
		n := &redlockNode{index: i, rdb: rdb, addr: strconv.Itoa(i), dials: dialwatch.Of(rdb)}
		if c, ok := rdb.(*redis.Client); ok {
			n.addr = c.Options().Addr
		}
		r.nodes = append(r.nodes, n)
	}
	if len(clients) < 3 || len(clients)%2 == 0 {
		return nil, invalidf("a Redlock needs an odd number of masters, at least 3; got %d", len(clients))
	}
	if err := r.cfg.validate(forRedlock); err != nil {
		return nil, err
	}
	return r, nil
}

// Quorum returns how many nodes must agree: a majority; 0 for a nil Redlock.
func (r *Redlock) Quorum() int {
	if r == nil {
		return 0
	}
	return r.quorum
}

// RedlockMutex is an exclusive lock held on a majority of a [Redlock]'s
// nodes. Its leases are ordinary [Lease] values, renewed every TTL/3 while
// a majority confirms in time. Unlock succeeds where a majority let go
// within the node timeout; a failed release is resent in the background
// within [CleanupTimeout] (cut short by closing the clients), then logged.
type RedlockMutex struct {
	r           *Redlock
	name        string
	keys        keys
	cfg         settings
	err         error
	nodeTimeout time.Duration
	rules       leaseRules // what its leases share
}

// redlockSlack is given up besides TTL × drift: Redis expires to the ms.
const redlockSlack = 2 * time.Millisecond

// Mutex returns the lock called name; options override the Redlock's.
func (r *Redlock) Mutex(name string, opts ...Option) *RedlockMutex {
	if r == nil || r.nodes == nil {
		return &RedlockMutex{name: name, err: invalidf("a Redlock not made by NewRedlock")}
	}
	cfg := r.cfg.with(opts)
	ttl, renew := cfg.holdTTL()
	m := &RedlockMutex{r: r, name: name, cfg: cfg, keys: keysFor(cfg.prefix, name),
		rules: leaseRules{log: cfg.logger, drift: cfg.drift, slack: redlockSlack, renew: renew}}
	m.nodeTimeout = cmp.Or(cfg.nodeTimeout, min(max(ttl/50, 10*time.Millisecond), 200*time.Millisecond))
	m.err = cmp.Or(validateName(name), cfg.validate(forRedlock))
	if m.err == nil && m.nodeTimeout >= ttl/2 {
		m.err = invalidf("node timeout %v is not small against the TTL %v", m.nodeTimeout, ttl)
	}
	return m
}

// Name returns the lock's name.
func (m *RedlockMutex) Name() string { return m.name }

// TryLock makes one attempt on every node and never waits. When no majority
// granted in time, it returns a [*QuorumError] naming each node that did
// not and why. A failed attempt, or one won once ctx ended, is given back
// as Unlock gives back a hold, with the call's tombstone; the latter returns
// ctx's error, matching [ErrNotAcquired].
func (m *RedlockMutex) TryLock(ctx context.Context) (*Lease, error) {
	return m.acquire(ctx, true)
}

// Lock attempts until it takes the lock on a majority, or ctx ends or the
// wait set by [WithWait] runs out; then the error matches ctx's error and
// wraps the last full attempt's [*QuorumError]. Between attempts it waits a
// random moment, so contenders do not collide again. Failed attempts are
// given back as TryLock's are.
func (m *RedlockMutex) Lock(ctx context.Context) (*Lease, error) {
	return m.acquire(ctx, false)
}

func (m *RedlockMutex) acquire(ctx context.Context, try bool) (*Lease, error) {
	if m == nil || m.r == nil && m.err == nil {
		return nil, invalidf("a RedlockMutex not made by Redlock.Mutex")
	}
	if m.err != nil { // bad arguments fail before any I/O
		return nil, m.err
	}
	return acquireBy(ctx, m.cfg, observe.KindRedlock, m.name, try, m.take)
}

// take attempts once (try), or until an attempt wins or ctx ends.
func (m *RedlockMutex) take(ctx context.Context, try bool) (*Lease, error) {
	var last error
	observed := m.cfg.observer.callIn(ctx) // nil when nobody observes
	for {
		if err := ctx.Err(); err != nil {
			if last == nil {
				return nil, acquireError(ctx, err)
			}
			return nil, fmt.Errorf("%w: %w", err, last)
		}
		l, retryIn, err := m.attempt(ctx)
		if l != nil {
			return keep(ctx, l)
		}
		var quorum *QuorumError
		if try || !errors.As(err, &quorum) || errors.Is(err, ErrWrongType) || quorum.outcome == ErrPermission {
			return nil, err // bad input, a foreign key, no permission: trying again will not help
		}
		if last == nil || contextDone(ctx) == nil { // an attempt ctx cut short tells nothing of the nodes
			last = err
		}
		select {
		case <-time.After(retryIn):
			observed.wait(ctx, observe.WaitRetry, err)
		case <-ctx.Done():
		}
	}
}

// errHeldThere is a node's refusal of an attempt.
var errHeldThere = errors.New("held by another owner")

// ttlInUse records ttl for the restart guard and returns the longest so far.
func (r *Redlock) ttlInUse(ttl time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.longest = max(r.longest, ttl)
	return r.longest
}

// drift is how much of a hold's TTL a Redlock gives up to clocks.
func (m *RedlockMutex) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*m.cfg.drift) + redlockSlack
}

// The KEYS a Redlock's node takes: the Mutex scripts', up to the holder
// info and marks a Redlock does not keep.
var (
	redlockAcquireLayout = scripts.LayoutOf(scripts.MutexAcquire).Before("HOLDER")
	redlockAbandonLayout = scripts.LayoutOf(scripts.MutexAbandon).Before("HOLDER")
	redlockExtendLayout  = scripts.LayoutOf(scripts.MutexExtend).Before("FORCED")
	redlockReleaseLayout = scripts.LayoutOf(scripts.MutexRelease).Before("HOLDER")
)

// attempt takes the lock on a majority, or gives back what it took and
// returns a *QuorumError and when to try again.
func (m *RedlockMutex) attempt(ctx context.Context) (*Lease, time.Duration, error) {
	r := m.r
	owner := newOwnerToken()
	ttl, _ := m.cfg.holdTTL()
	longest := r.ttlInUse(ttl)
	keys := m.keys.callKeys(redlockAcquireLayout, m.keys.tombstone(owner))
	r.preload(ctx, max(m.nodeTimeout, redlockPreloadWait))
	start := r.clock.Now()
	votes, errs := onNodes(ctx, r.nodes, m.nodeTimeout, func(ctx context.Context, n *redlockNode) (vote, error) {
		return m.askNode(ctx, n, keys, owner, ttl, longest)
	})
	valid := func() bool { // by whichever clock went further: a suspension stops only the monotonic one
		now := r.clock.Now()
		return m.drift(ttl)+max(now.Sub(start), r.clock.Wall(now).Sub(r.clock.Wall(start))) < ttl
	}
	op := "lock"
	foreign := countErrs(errs, ErrWrongType) > 0
	if countErrs(errs, nil) >= r.quorum && valid() && !foreign {
		// The token is the highest counter granted, raised to on every node
		// (redlock_fence.lua); it holds once a majority have it.
		var token int64
		for i, err := range errs {
			if err == nil {
				token = max(token, votes[i].token)
			}
		}
		_, fenced := onNodes(ctx, r.nodes, m.nodeTimeout, runOn(scripts.RedlockFence,
			m.keys.callKeys(scripts.LayoutOf(scripts.RedlockFence)), scripts.FenceArgs{Token: token}))
		if countErrs(fenced, nil) < r.quorum { // report the nodes that missed the token
			op, errs = "lock (fencing token)", fenced
		} else if valid() {
			return m.newLease(owner, uint64(token), start, ttl), 0, nil
		}
	}
	m.giveBack(ctx, votes, m.abandonOn(owner), "dlock: could not clear up a failed Redlock attempt; it expires with its TTL")

	quorumErr := m.quorumError(op, errs)
	held := countErrs(errs, errHeldThere)
	switch {
	case len(errs)-held < r.quorum:
		quorumErr.outcome = ErrNotAcquired
	case len(errs)-held-countErrs(errs, ErrPermission) < r.quorum:
		quorumErr.outcome = ErrPermission
	}
	if foreign { // someone else's key under the name: fail on any node, don't wait
		quorumErr.Late = false
		return nil, 0, fmt.Errorf("%w: %w", ErrWrongType, quorumErr)
	}
	if quorumErr.Late { // a quorum, but its validity ran out: as a Client's grant that expired unconfirmed
		quorumErr.outcome = ErrNotAcquired
	}
	return nil, retryDelay(votes, r.quorum), quorumErr
}

// preload loads dlock's scripts on each node once, within wait, before the
// vote's clock starts: a load may outlast the node timeout and cost a cold
// node its vote. A node that loses them later gets them within a vote.
func (r *Redlock) preload(ctx context.Context, wait time.Duration) {
	if slices.ContainsFunc(r.nodes, func(n *redlockNode) bool { return !n.preloaded.Load() }) {
		onNodes(ctx, r.nodes, wait, func(ctx context.Context, n *redlockNode) (struct{}, error) {
			if n.preloaded.CompareAndSwap(false, true) {
				n.fns.Preload(ctx, n.rdb, scripts.MutexAcquire)
			}
			return struct{}{}, nil
		})
	}
}

// redlockPreloadWait bounds preload, when longer than the node timeout.
const redlockPreloadWait = 100 * time.Millisecond

// vote is what a node answered an attempt: granted with its counter, or
// held by another owner for held more ms.
type vote struct {
	answered    bool
	token, held int64
}

// askNode asks node n for the lock and, with a restart guard, whether it
// may vote (redlockNode.mayVote) for a guard of at least the longest TTL.
func (m *RedlockMutex) askNode(ctx context.Context, n *redlockNode, keys []string, owner string,
	ttl, longest time.Duration) (vote, error) {
	rights := n.rights.arg(scripts.MutexAcquire)
	res, err := scripts.AcquireReply(fcall.Run(ctx, &n.fns, n.rdb, scripts.MutexAcquire, keys, withRights[scripts.MutexAcquireArgs]{
		scripts.MutexAcquireArgs{Acquire: scripts.Acquire{Owner: owner, TTL: ttl.Milliseconds(), Waiter: "", WaiterTTL: 0}, Previous: "", Info: ""}, rights}))
	if err == nil && (len(res) != 2 || res[0] == -1) {
		err = fcall.ErrUnexpectedReply
	}
	if err == nil && rights == rightsCheck {
		n.rights.passed(scripts.MutexAcquire)
	}
	n.rights.refused(err)
	switch {
	case isWrongType(err):
		return vote{answered: true}, fmt.Errorf("%w: lock %q: %s", ErrWrongType, m.name, wrongTypeDetail(err))
	case fcall.IsPermission(err): // an answer: its give-back is waited for, as a refusal may come after a write
		return vote{answered: true}, fmt.Errorf("%w: %w", ErrPermission, err)
	case err != nil:
		return vote{}, err
	case res[0] != 1:
		return vote{answered: true, held: res[1]}, errHeldThere
	case m.cfg.restartGuard > 0:
		return vote{answered: true, token: res[1]}, n.mayVote(ctx, max(m.cfg.restartGuard, longest))
	}
	return vote{answered: true, token: res[1]}, nil
}

const (
	redlockRetryMin    = 10 * time.Millisecond
	redlockRetrySpread = 40 * time.Millisecond
)

// retryDelay is how long a waiting RedlockMutex waits to try again:
// redlockRetryMin plus up to redlockRetrySpread, or until other owners'
// holds on a quorum run out if sooner.
func retryDelay(votes []vote, quorum int) time.Duration {
	delay := redlockRetryMin + rand.N(redlockRetrySpread)
	var left []int64
	for _, v := range votes {
		if v.held > 0 {
			left = append(left, v.held)
		}
	}
	if len(left) < quorum {
		return delay
	}
	return min(delay, time.Duration(slices.Min(left))*time.Millisecond)
}

// abandonOn (safe to resend) releases owner's hold, leaving its tombstone.
func (m *RedlockMutex) abandonOn(owner string) nodeCall {
	return runOn(scripts.MutexAbandon, m.keys.callKeys(redlockAbandonLayout, m.keys.tombstone(owner)),
		scripts.AbandonArgs{Owner: owner, Publish: "PUBLISH", Waiter: "", Also: ""})
}

// giveBack runs give, safe to send twice, on the nodes that answered votes
// (all, without votes) within the node timeout and returns their errors;
// on the others in the background. A failed give (but errNotHeldThere) is
// resent in the background within [CleanupTimeout], so a slow link leaves
// nothing held for its TTL; if that fails too, warning is logged.
func (m *RedlockMutex) giveBack(ctx context.Context, votes []vote, give nodeCall, warning string) []error {
	ctx = context.WithoutCancel(ctx) // each node's call is bounded by onNodes
	failed := func(err error) bool { return err != nil && !errors.Is(err, errNotHeldThere) }
	inBackground := func(n *redlockNode) {
		_, errs := onNodes(ctx, []*redlockNode{n}, CleanupTimeout, give)
		if failed(errs[0]) {
			m.cfg.logger.Warn(warning, "lock", m.name, "err", &NodeError{Node: n.index, Addr: n.addr, Err: errs[0]})
		}
	}
	var waitFor []*redlockNode
	for i, n := range m.r.nodes {
		if votes == nil || votes[i].answered {
			waitFor = append(waitFor, n)
		} else {
			go inBackground(n)
		}
	}
	_, errs := onNodes(ctx, waitFor, m.nodeTimeout, give)
	for i, err := range errs {
		if failed(err) {
			go inBackground(waitFor[i])
		}
	}
	return errs
}
