package dlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
)

// MaxLeaderValueLen is the longest value a candidate may campaign or
// proclaim with, in bytes: it is published to every observer.
const MaxLeaderValueLen = 64 << 10

// Election picks one leader among candidates. A leadership is a lease of a
// lock: renewed while the leader lives, lost within the TTL when it stops,
// handed on at once when it resigns. Its term is the lease's fencing token,
// so a deposed leader's commands can be fenced. An Election handle is one
// candidate, leading at most once at a time; it is safe for concurrent use.
type Election struct {
	handle
	spec   *acquireSpec
	leader string // the observers' channel: the leadership's hash's name (channels are not keys)

	proclaimKeys, leaderKeys []string // the KEYS of Proclaim and Leader

	mu    sync.Mutex
	lease *Lease // the latest leadership, ended or not
}

// Leader is a leadership as observers see it.
type Leader struct {
	Value string // what the leader campaigned or last proclaimed with
	Term  uint64 // strictly increasing with each new leadership
}

var electionKind = mutexKind.releasedBy(scripts.ElectionRelease, scripts.MutexAbandon)

// Election returns the candidate handle of the election called name, with
// options and bad input as [Client.Mutex]'s; the TTL is how long a crashed
// leader keeps the others waiting. Its lock is a [Mutex] of the same name.
func (c *Client) Election(name string, opts ...Option) *Election {
	e := &Election{handle: c.newHandle(name, opts, optionScope{"Election", optEveryLock | optWaiterRefresh | optReplicaAck})}
	// The Mutex scripts it borrows take the keys up to the holder info it
	// does not keep; more: Proclaim's, Leader's and the observers' channel.
	var more [][]string
	e.spec, more = e.layOut(acquireSpec{op: "campaign", script: scripts.ElectionAcquire, publishes: true, lease: leaseSpec{kind: electionKind}},
		scripts.LayoutOf(electionKind.abandon).Before("HOLDER"), scripts.LayoutOf(electionKind.extend).Before("HOLDER"),
		scripts.ElectionProclaimLayout, scripts.ElectionProclaimLayout.Before("OBSERVERS"), scripts.ElectionProclaimLayout.Only("OBSERVERS"))
	if e.err == nil {
		e.proclaimKeys, e.leaderKeys, e.leader = more[0], more[1], more[2][0]
	}
	return e
}

// Campaign waits until this candidate leads with value, until ctx ends or
// [WithWait]'s wait runs out; the lease returned has the term as Token. A
// candidate already leading proclaims value and returns the same lease.
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
	campaign := func(ctx context.Context, try bool) (*Lease, error) {
		a := &candidate{value: value}
		return acquireCall(ctx, a.begin(&e.handle, e.spec, a), try)
	}
	l, err := acquireBy(ctx, e.cfg, observe.KindElection, e.name, false, campaign)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.lease = l // current ignores it once it ended
	e.mu.Unlock()
	return l, nil
}

// Resign gives up this candidate's leadership: the next candidate leads at
// once, in a new term. It returns [ErrNotHeld] when this candidate does not
// lead. Like Unlock, it resigns even when ctx is cancelled.
func (e *Election) Resign(ctx context.Context) error {
	l, err := e.leading(ctx, "")
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}

// leading is this candidate's leadership, or why a call that needs it fails.
func (e *Election) leading(ctx context.Context, value string) (*Lease, error) {
	if err := e.check(ctx, value); err != nil {
		return nil, err
	}
	if l := e.current(); l != nil {
		return l, nil
	}
	return nil, fmt.Errorf("%w: %q: this candidate does not lead", ErrNotHeld, e.name)
}

// Proclaim changes the value of this candidate's leadership, keeping it,
// and tells the observers. It returns [ErrNotHeld] when not leading.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	l, err := e.leading(ctx, value)
	if err != nil {
		return err
	}
	publish, err := e.c.publishCommand(ctx)
	if err != nil {
		return err
	}
	n, err := fcall.Run(ctx, &e.c.fns, e.c.rdb, scripts.ElectionProclaim, e.proclaimKeys,
		scripts.ProclaimArgs{Owner: l.hold.(*clientHold).owner, Value: value, Publish: publish}).Int64()
	if err != nil {
		return redisError("proclaim", e.name, err)
	}
	if n != 1 {
		l.refused()
		return fmt.Errorf("%w: %q: the leadership ended before the proclamation", ErrNotHeld, e.name)
	}
	return nil
}

// Leader returns who leads now, or an error matching [ErrNoLeader] if none.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.check(ctx, ""); err != nil {
		return Leader{}, err
	}
	reply, err := fcall.Run(ctx, &e.c.fns, e.c.rdb, scripts.ElectionLeader, e.leaderKeys, scripts.NoArgs{}).Slice()
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

// Observe returns a channel of leaders: the current one (if any), then each
// new leadership and proclamation, never going back; a slow reader skips to
// the latest. A term passed while disconnected is missed; the leader is
// reread on reconnecting and every TTL/3. The channel closes when ctx ends.
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
	subscribe := e.c.rdb.Subscribe
	if publish, err := e.c.publishCommand(ctx); err == nil && publish == "SPUBLISH" {
		subscribe = e.c.rdb.SSubscribe
	}
	ps := subscribe(ctx, e.leader)
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
	for ok := true; ok; {
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
				// A current term's message may be older than a read's value:
				// it only prompts a read, after the last one queued.
				if l, parsed := parseLeader(m.Payload); parsed && l.Term > last.Term {
					ok = emit(l)
				} else if parsed && len(messages) == 0 {
					ok = reread()
				}
			}
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
	if e.err == nil && len(value) > MaxLeaderValueLen {
		return invalidf("leader value of %d bytes exceeds %d", len(value), MaxLeaderValueLen)
	}
	return e.handle.check(ctx)
}

// current is this candidate's leadership, if it has one that has not ended.
func (e *Election) current() *Lease {
	e.mu.Lock()
	l := e.lease
	e.mu.Unlock()
	if l == nil || l.reached(leaseEnded) {
		return nil
	}
	return l
}

// candidate is one Campaign (see call).
type candidate struct {
	call
	value any // boxed once for all attempts
}

func (a *candidate) request(waiterID string, publish any) ([]any, string) {
	entry := a.entry(waiterID)
	return command(&a.call, entry, scripts.ElectionAcquireArgs{Acquire: a.shared(entry), Value: a.value, Publish: publish}), entry
}

// abandonArgs: mutex_abandon.lua, with no registration before entry.
func (a *candidate) abandonArgs(entry string) scripts.AbandonArgs {
	return scripts.AbandonArgs{Waiter: entry, Also: ""}
}
