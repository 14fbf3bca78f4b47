package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/internal/scripts"
)

// call is one TryLock or Lock call of any type. All its attempts share one
// owner token and tombstone: a late copy of one finds the hold its own, or,
// once the call gave up, is refused.
type call struct {
	h         *handle
	spec      *acquireSpec
	v         variant // the type's own part: the call that embeds this one
	owner     string  // what the attempts show (a read-write lock's: the hold's member)
	tombstone string  // see keys.tombstone
	sent      time.Time

	grant       interface{ granted(handOver) *Lease } // reads a hand-over; nil where releases hand none
	watch, busy int                                   // in spec.channels: where the waiter listens, and the lock in its way's (a MultiLock's; else 0)
}

// variant is a type's part of the attempt; call's methods are the defaults.
type variant interface {
	// request is the attempt's command and the entry it registers ("" none).
	request(waiterID string, publish any) (argv []any, entry string)
	entry(waiterID string) string                 // the registration leave gives back
	valid(res []int64) bool                       // the reply has the script's form
	refused(res []int64, entry string) error      // notes a refusal, or the error it means
	abandonArgs(entry string) scripts.AbandonArgs // the waiter's part (abandon adds the owner)
	fresh()                                       // a new owner and tombstone
}

// begin makes a, embedded in v, a new call of h with spec.
func (a *call) begin(h *handle, spec *acquireSpec, v variant) *call {
	a.h, a.spec, a.v = h, spec, v
	v.fresh()
	return a
}

func (a *call) fresh() {
	a.owner = newOwnerToken()
	a.tombstone = a.h.keys.tombstone(a.owner)
}

func (a *call) entry(waiterID string) string            { return a.h.c.tagged(waiterID) }
func (a *call) valid(res []int64) bool                  { return len(res) == 2 && res[0] != -1 }
func (a *call) refused(res []int64, entry string) error { return nil }
func (a *call) abandonArgs(entry string) scripts.AbandonArgs {
	return scripts.AbandonArgs{Waiter: entry}
}

// rewatch reports the channel to wait on after the last refusal, and
// whether it moved: then the waiter listens there first, and tries again.
func (a *call) rewatch() (channel string, moved bool) {
	moved = a.busy != a.watch
	a.watch = a.busy
	return a.spec.channels[a.watch], moved
}

// command is an attempt's command: keys around the call's tombstone, args
// and the rights flag (rights.go). An attempt that registers always checks
// rights: one refused part-way could leave a set of waiters without TTL.
func command[A scripts.Args](a *call, entry string, args A) []any {
	s := a.spec
	argv := make([]any, 0, len(s.head)+1+len(s.rest)+fcall.ArgRoom)
	argv = append(argv, s.head...)
	argv = append(argv, a.tombstone)
	argv = append(argv, s.rest...)
	argv = args.Append(argv)
	if entry != "" {
		return append(argv, rightsCheck)
	}
	return append(argv, a.h.c.rights.arg(s.script))
}

// shared are the ARGV every acquire starts with, registering entry ("" none).
func (a *call) shared(entry string) scripts.Acquire {
	return scripts.Acquire{Owner: a.owner, TTL: a.spec.ttl, Waiter: entry, WaiterTTL: a.spec.registration}
}

// attempt makes one try at the lock: the lease, else retryIn, at most the
// hold's time left (negative: unknown). A waiterID registers the caller in
// the step that refuses it. An attempt that errs cleaned up after itself.
func (a *call) attempt(ctx context.Context, waiterID string) (l *Lease, retryIn time.Duration, err error) {
	var publish any
	if a.spec.publishes {
		if publish, err = a.h.c.publishCommand(ctx); err != nil {
			return nil, 0, err
		}
	}
	argv, entry := a.v.request(waiterID, publish)
	a.sent = a.h.c.clock.Now()
	cmd, unconfirmed := a.send(ctx, argv)
	res, err := scripts.AcquireReply(cmd)
	if tell := a.h.c.attempted; tell != nil {
		tell(attemptReport{script: a.spec.script, reply: res, entry: entry, err: err})
	}
	if err == nil && !a.v.valid(res) {
		err = fcall.ErrUnexpectedReply // -1 answers only an attempt already abandoned
	}
	if err == nil && argv[len(argv)-1] == rightsCheck {
		a.h.c.rights.passed(a.spec.script)
	}
	a.h.c.rights.refused(err)
	if err != nil {
		if !isWrongType(err) {
			a.abandon(ctx, entry)
		}
		return nil, 0, redisError(a.spec.op, a.spec.lease.name, err)
	}
	if res[0] != 1 {
		if err := a.v.refused(res, entry); err != nil {
			return nil, 0, err
		}
		return nil, time.Duration(res[1]) * time.Millisecond, nil
	}
	if unconfirmed != nil {
		a.abandon(ctx, entry)
		return nil, 0, fmt.Errorf("dlock: %s %q: %w", a.spec.op, a.spec.lease.name, unconfirmed)
	}
	return a.lease(uint64(res[1]), 0, res[1:]), 0, nil
}

// attemptReport is what one attempt tells a test (Client.attempted).
type attemptReport struct {
	script *redis.Script
	reply  []int64
	entry  string
	err    error
}

// send runs an attempt: through the coalescer, or, with [WithReplicaAck],
// with WAIT after it (see Client.sendAcknowledged).
func (a *call) send(ctx context.Context, argv []any) (*redis.Cmd, error) {
	if a.h.cfg.ack.n == 0 {
		return a.h.c.flights.Send(ctx, a.spec.script, argv), nil
	}
	calls := []fcall.Call{{Script: a.spec.script, Argv: argv}}
	acks := a.h.c.sendAcknowledged(ctx, a.h.cfg.ack, calls)
	return calls[0].Cmd, acks[0]
}

// lease starts the lease of a hold granted with token for validity (0: the
// TTL); a MultiLock group's has a token per lock, in tokens.
func (a *call) lease(token uint64, validity time.Duration, tokens []int64) *Lease {
	spec := a.spec.lease
	spec.owner, spec.tombstone, spec.token, spec.sent, spec.validity = a.owner, a.tombstone, token, a.sent, validity
	if spec.names != nil {
		spec.group = &groupTokens{names: spec.names, tokens: make([]uint64, len(spec.names))}
		for i := range spec.group.tokens {
			spec.group.tokens[i] = uint64(tokens[i])
		}
	}
	return a.h.c.startLease(spec)
}

// leave unregisters a waiter that stops waiting without the lock (see
// abandon), passing on a wake-up it may have had.
func (a *call) leave(ctx context.Context, waiterID string) (mayHaveHeld bool, err error) {
	return a.abandon(ctx, a.v.entry(waiterID))
}

// abandon gives up the call after an attempt that registered entry,
// whatever ctx, within [CleanupTimeout]. It drops the registration and a
// hold nobody heard of, and leaves the tombstone for late copies. A Lock
// goes on under a fresh owner. mayHaveHeld: it gave a hold back, err, or it
// may have been sent twice (the reply read then answers the later copy).
func (a *call) abandon(ctx context.Context, entry string) (mayHaveHeld bool, err error) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	s, c := a.spec, a.h.c
	keys := make([]string, 0, len(s.abandonKeys[0])+1+len(s.abandonKeys[1]))
	keys = append(append(append(keys, s.abandonKeys[0]...), a.tombstone), s.abandonKeys[1]...)
	args := a.v.abandonArgs(entry)
	args.Owner = a.owner
	sent := time.Now()
	var released int64 // 1 when the script gave a hold back, else 0
	if args.Publish, err = c.publishCommand(ctx); err == nil {
		script := s.lease.kind.abandon
		released, err = c.flights.Send(ctx, script, fcall.Argv(script, keys, args)).Int64()
	}
	if err != nil {
		a.h.cfg.logger.Warn("dlock: could not clear up a failed attempt; it expires with its TTL", "lock", s.lease.name, "err", err)
	}
	mayHaveHeld = released == 1 || err != nil || c.mayHaveResent(sent)
	a.v.fresh()
	return mayHaveHeld, err
}
