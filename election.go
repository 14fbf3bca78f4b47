package dlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/scripts"
)

// MaxLeaderValueLen is the longest value a candidate may campaign or
// proclaim with, in bytes: it is published to every observer.
const MaxLeaderValueLen = 64 << 10

// Election picks one leader among candidates, for running one active
// instance of a service. A leadership is a lease of a lock: renewed while
// the leader lives, lost when it stops (crashes, is partitioned) within the
// TTL, and handed on at once when it resigns. Each leadership has a term,
// its lease's fencing token: strictly increasing, so what the leader
// commands can be fenced against a deposed leader that has not noticed yet.
//
// An Election handle is one candidate: it leads at most once at a time.
// Make one handle per candidate (per process, usually). It is safe for
// concurrent use.
type Election struct {
	c    *Client
	name string
	keys keys
	cfg  settings
	err  error // bad arguments, returned before any I/O

	leaderKey, observeChannel string

	mu    sync.Mutex
	lease *Lease // the current leadership, if this candidate leads
}

// Leader is a leadership as observers see it.
type Leader struct {
	Value string // what the leader campaigned or last proclaimed with
	Term  uint64 // strictly increasing with each new leadership
}

var electionKind = &leaseKind{
	extend:  scripts.MutexExtend,
	release: scripts.ElectionRelease,
	ttl:     scripts.MutexTTL,
	abandon: scripts.MutexAbandon,
}

// Election returns the candidate handle of the election called name.
// Options override the Client's defaults; the TTL is how long a crashed
// leader keeps the others waiting. Nothing is sent to Redis; a bad name or
// option is returned by the first call, matching [ErrInvalid].
//
// An election's lock is a [Mutex] of the same name: [Client.Describe] and
// ForceUnlock see it, and a Mutex of that name would contend with it.
func (c *Client) Election(name string, opts ...Option) *Election {
	if c == nil {
		return &Election{name: name, err: invalidf("nil dlock.Client")}
	}
	cfg := c.cfg.with(opts)
	k := c.waitingKeys(cfg.prefix, name)
	e := &Election{c: c, name: name, cfg: cfg, keys: k,
		leaderKey: k.lock + ":leader", observeChannel: k.lock + ":leader"}
	if e.err = validateName(name); e.err == nil {
		e.err = cfg.validate(forElection)
	}
	return e
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Campaign waits until this candidate leads, with value, until ctx ends or
// the wait set by [WithWait] runs out. It returns the leadership as a lease:
// its Token is the term; Done closes when the leadership is lost or
// resigned; Context gives a context that ends with it. The lease renews
// itself (unless [WithLeaseTime] was given).
//
// A Campaign by a candidate that already leads proclaims value and returns
// the same lease.
func (e *Election) Campaign(ctx context.Context, value string) (*Lease, error) {
	if err := e.check(ctx, value); err != nil {
		return nil, err
	}
	if l := e.current(); l != nil {
		if err := e.Proclaim(ctx, value); err != nil {
			return nil, err
		}
		return l, nil
	}
	var l *Lease
	var err error
	if o := e.cfg.observer; o != nil {
		l, err = o.acquire(ctx, KindElection, e.name, e.cfg.triesOnce(), func(ctx context.Context) (*Lease, error) {
			return e.c.waitFor(ctx, e.cfg, e.keys.own, e.candidate(value))
		})
	} else {
		l, err = e.c.waitFor(ctx, e.cfg, e.keys.own, e.candidate(value))
	}
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.lease = l
	e.mu.Unlock()
	l.whenEnded(func(error) {
		e.mu.Lock()
		if e.lease == l {
			e.lease = nil
		}
		e.mu.Unlock()
	})
	return l, nil
}

// Resign gives up this candidate's leadership and wakes the next candidate,
// which then leads at once, in a new term. It returns [ErrNotHeld] when this
// candidate does not lead. Like Unlock, it resigns even when ctx is already
// cancelled.
func (e *Election) Resign(ctx context.Context) error {
	if err := e.check(ctx, ""); err != nil {
		return err
	}
	l := e.current()
	if l == nil {
		return fmt.Errorf("%w: %q: this candidate does not lead", ErrNotHeld, e.name)
	}
	return l.Unlock(ctx)
}

// Proclaim changes the value of this candidate's leadership without giving
// it up, and tells the observers. It returns [ErrNotHeld] when this
// candidate does not lead.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	if err := e.check(ctx, value); err != nil {
		return err
	}
	l := e.current()
	if l == nil {
		return fmt.Errorf("%w: %q: this candidate does not lead", ErrNotHeld, e.name)
	}
	publish, err := e.c.publishCommand(ctx)
	if err != nil {
		return err
	}
	n, err := runScript(ctx, e.c.rdb, scripts.ElectionProclaim, []string{e.keys.lock, e.leaderKey, e.observeChannel},
		l.owner, value, publish).Int64()
	if err != nil {
		return redisError("proclaim", e.name, err)
	}
	if n != 1 {
		l.refused()
		return fmt.Errorf("%w: %q: the leadership ended before the proclamation", ErrNotHeld, e.name)
	}
	return nil
}

// Leader returns who leads now, or an error matching [ErrNoLeader] when
// nobody does.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.check(ctx, ""); err != nil {
		return Leader{}, err
	}
	reply, err := runScript(ctx, e.c.rdb, scripts.ElectionLeader, []string{e.keys.lock, e.leaderKey}).Slice()
	if err != nil {
		return Leader{}, redisError("leader", e.name, err)
	}
	if len(reply) == 0 {
		return Leader{}, fmt.Errorf("%w in %q", ErrNoLeader, e.name)
	}
	term, _ := reply[0].(int64)
	value, _ := reply[1].(string)
	return Leader{Value: value, Term: uint64(term)}, nil
}

// Observe returns a channel of the election's leaders, in order: the
// current one first (if any), then each new leadership and each
// proclamation, as Redis publishes them. A term that passes while the
// subscription is down is not seen, but the current leader is read again
// whenever it comes back, and every TTL/3 besides, so no change is missed
// for long. The channel is closed when ctx ends. Read it promptly: a slow
// reader holds the observation up, not the election.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	if e.check(ctx, "") != nil {
		close(out)
		return out
	}
	go e.observe(ctx, out)
	return out
}

func (e *Election) observe(ctx context.Context, out chan<- Leader) {
	defer close(out)
	var ps *redis.PubSub
	if publish, err := e.c.publishCommand(ctx); err == nil && publish == "SPUBLISH" {
		ps = e.c.rdb.SSubscribe(ctx, e.observeChannel)
	} else {
		ps = e.c.rdb.Subscribe(ctx, e.observeChannel)
	}
	defer ps.Close()
	messages := ps.ChannelWithSubscriptions()

	var last Leader
	emit := func(l Leader) bool {
		if l.Term < last.Term || l == last {
			return true
		}
		last = l
		select {
		case out <- l:
			return true
		case <-ctx.Done():
			return false
		}
	}
	reread := func() bool {
		l, err := e.Leader(ctx)
		if err != nil {
			return ctx.Err() == nil // nobody leads, or Redis is away: later
		}
		return emit(l)
	}
	ttl, _ := e.cfg.holdTTL()
	ticker := time.NewTicker(ttl / 3)
	defer ticker.Stop()
	for {
		var ok bool
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			ok = reread()
		case m, open := <-messages:
			if !open {
				return
			}
			switch m := m.(type) {
			case *redis.Subscription: // subscribed, or again after a reconnect
				ok = reread()
			case *redis.Message:
				l, parsed := parseLeader(m.Payload)
				ok = !parsed || emit(l)
			default:
				ok = true
			}
		}
		if !ok {
			return
		}
	}
}

// parseLeader reads an observers' message, "term:value".
func parseLeader(payload string) (Leader, bool) {
	termText, value, found := strings.Cut(payload, ":")
	term, err := strconv.ParseUint(termText, 10, 64)
	if !found || err != nil {
		return Leader{}, false
	}
	return Leader{Value: value, Term: term}, true
}

func (e *Election) check(ctx context.Context, value string) error {
	if e.err != nil {
		return e.err
	}
	if len(value) > MaxLeaderValueLen {
		return invalidf("leader value of %d bytes exceeds %d", len(value), MaxLeaderValueLen)
	}
	return e.c.usable(ctx)
}

// current is this candidate's leadership, if it has one that has not ended.
func (e *Election) current() *Lease {
	e.mu.Lock()
	l := e.lease
	e.mu.Unlock()
	if l == nil || l.ended() {
		return nil
	}
	return l
}

// candidate is one Campaign. All its attempts campaign under the same
// owner token, the campaign's, and share its tombstone: a copy of an earlier
// attempt arriving after a later one was elected finds itself leading and
// reports the same term (it registers nothing), and a copy of any of them
// arriving after the campaign gave up is refused.
type candidate struct {
	e         *Election
	value     string
	owner     string // the leadership's, should it be won
	tombstone string // named after owner: see keys.tombstone
}

func (e *Election) candidate(value string) *candidate {
	a := &candidate{e: e, value: value}
	a.newCall()
	return a
}

// newCall starts the campaign anew: a new owner token and a new tombstone,
// so that nothing an earlier start sent counts for it.
func (a *candidate) newCall() {
	a.owner = newOwnerToken()
	a.tombstone = a.e.keys.tombstone(a.owner)
}

func (a *candidate) attempt(ctx context.Context, waiterID string) (*Lease, time.Duration, error) {
	e := a.e
	publish, err := e.c.publishCommand(ctx)
	if err != nil {
		return nil, 0, err
	}
	owner := a.owner
	ttl, _ := e.cfg.holdTTL()
	sent := time.Now()
	cmd, unconfirmed := e.c.runAcquire(ctx, e.cfg, scripts.ElectionAcquire,
		[]string{e.keys.lock, e.keys.fence, a.tombstone, e.keys.waiters, e.leaderKey, e.observeChannel},
		owner, ttl.Milliseconds(), e.c.tagged(waiterID), waiterLease(e.cfg.waiterRefresh).Milliseconds(), a.value, publish)
	res, err := cmd.Int64Slice()
	if err == nil && (len(res) != 2 || res[0] == -1) {
		err = errUnexpectedReply // -1 answers only an attempt already abandoned
	}
	if err != nil {
		if !isWrongType(err) {
			a.abandon(ctx, owner, waiterID)
		}
		return nil, 0, redisError("campaign", e.name, err)
	}
	if res[0] != 1 {
		return nil, time.Duration(res[1]) * time.Millisecond, nil
	}
	if unconfirmed != nil {
		a.abandon(ctx, owner, waiterID)
		return nil, 0, fmt.Errorf("dlock: campaign %q: %w", e.name, unconfirmed)
	}
	return e.c.startLease(leaseSpec{
		name: e.name, kind: electionKind, keys: []string{e.keys.lock, e.keys.forced()},
		relKeys: []string{e.keys.lock, e.keys.channel, e.keys.waiters, e.leaderKey},
		owner:   owner, token: uint64(res[1]), sent: sent, cfg: e.cfg, mark: e.keys.lock, tombstone: a.tombstone,
	}), 0, nil
}

func (a *candidate) leave(ctx context.Context, waiterID string) { a.abandon(ctx, a.owner, waiterID) }

// abandon gives up a campaign's attempt whose outcome is unknown (owner), its
// registration as a waiting candidate (waiterID), or both; see
// mutex_abandon.lua. The tombstone keeps the campaign's attempts so far
// out, so a Campaign that goes on (see [ErrUnavailable]) goes on with a new
// owner token and tombstone.
func (a *candidate) abandon(ctx context.Context, owner, waiterID string) {
	e := a.e
	e.c.abandon(ctx, e.name, electionKind.abandon,
		[]string{e.keys.lock, e.keys.channel, a.tombstone, e.keys.waiters, e.keys.fence},
		e.cfg.logger, owner, tombstoneLifeMillis, e.c.tagged(waiterID), "")
	a.newCall()
}

func (a *candidate) client() *Client { return a.e.c }
