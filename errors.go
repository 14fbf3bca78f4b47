package dlock

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/observe"
)

// Sentinel errors. Match them with [errors.Is]: the errors dlock returns wrap
// them with detail, and a wait that ends with its context also matches
// [context.Canceled] or [context.DeadlineExceeded].
var (
	// ErrNotAcquired: the lock is held by someone else, and the call did not
	// (or was not allowed to) wait for it.
	ErrNotAcquired = errors.New("dlock: not acquired")

	// ErrNotHeld: an Unlock, Extend or TTL of a hold that is not ours: already
	// released, expired, deleted, or held by another owner.
	ErrNotHeld = errors.New("dlock: not held")

	// ErrLeaseLost: a lease ended without being released: Redis refused to
	// renew it, or its deadline passed before a renewal was confirmed. From
	// then on another owner may hold the lock. The error also matches a
	// [LossReason] saying how ([LossExpired], [LossTaken], [LossForced],
	// [LossUnreachable]); [Lease.AtRisk] warns before a loss.
	ErrLeaseLost = errors.New("dlock: lease lost")

	// ErrWrongType: a key of the lock holds what this kind of lock did not
	// write: a Redis value of another type, another kind of lock's value,
	// or data of another program (a string that is no owner token, a hash
	// without the mark of dlock's state…). The error names the key. dlock
	// leaves such a key untouched: it neither acquires, nor waits behind,
	// nor removes it.
	ErrWrongType = errors.New("dlock: key holds the wrong type of value")

	// ErrInvalid: bad input (an empty name, a TTL below [MinTTL]…). Returned
	// before anything is sent to Redis.
	ErrInvalid = errors.New("dlock: invalid argument")

	// ErrUpgrade: a write lock asked by an owner that holds only read locks
	// of an [RWMutex]. Waiting would deadlock as soon as two readers did it,
	// so it is refused at once: release the reads first. (The other way,
	// taking reads while writing and keeping them past the write, works.)
	ErrUpgrade = errors.New("dlock: read lock held: cannot upgrade to a write lock")

	// ErrPermits: a [Semaphore] opened with a number of permits other than
	// the one its name has in Redis. Every client must agree on it; change it
	// deliberately with [Semaphore.SetPermits].
	ErrPermits = errors.New("dlock: semaphore has another number of permits")

	// ErrNoLeader: an [Election] that nobody leads right now.
	ErrNoLeader = errors.New("dlock: no leader")

	// ErrReplicaAck: an acquisition, renewal or [Lease.Extend] that fewer
	// replicas confirmed than [WithReplicaAck] asks for. An acquisition's
	// hold was released; a lease whose Extend it ends keeps the deadline it
	// had (or the Extend's, if that is sooner), and a renewal it ends is
	// tried again.
	ErrReplicaAck = errors.New("dlock: too few replicas acknowledged the lock")

	// ErrPermission: Redis refused a command for lack of permission (ACL):
	// the user dlock logs in as may not run one of the commands dlock needs,
	// or not on that key or channel. The README lists what to grant. Never
	// reported as [ErrNotAcquired].
	ErrPermission = errors.New("dlock: permission denied by Redis")

	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("dlock: client closed")

	// ErrUnavailable: Redis could not serve the call for a while, for a
	// reason that passes on its own: a cluster slot being migrated
	// (TRYAGAIN, or MOVED once go-redis's redirections ran out), a cluster
	// missing a master (CLUSTERDOWN), a server loading its data (LOADING),
	// a master that failed over or restarted, or no server at the address
	// (connection refused or reset, READONLY, MASTERDOWN). The Redis or
	// connection error stays in the chain. An acquisition that fails so
	// holds nothing: one whose outcome is unknown was abandoned, as after
	// any error. A waiting Lock (Acquire, Campaign…) tries again, backing
	// off up to a second between tries, until its context ends; then, if
	// Redis was still unavailable, it returns this error with the
	// context's, never [ErrNotAcquired]. TryLock and the other calls
	// return it at once, and are worth trying again.
	ErrUnavailable = errors.New("dlock: Redis temporarily unavailable")
)

var errUnexpectedReply = errors.New("unexpected reply from Redis")

// notAcquired is a refusal that names the lock and, where the attempt
// learnt it, how long the hold in its way lasts at most.
func notAcquired(name string, left time.Duration) error {
	if left <= 0 {
		return fmt.Errorf("%w: %q is held", ErrNotAcquired, name)
	}
	return fmt.Errorf("%w: %q is held, for %v at most", ErrNotAcquired, name, left.Round(time.Millisecond))
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// redisError classifies an error from a script run on the lock name's keys.
func redisError(op, name string, err error) error {
	if isWrongType(err) {
		return fmt.Errorf("%w: lock %q: %s", ErrWrongType, name, wrongTypeDetail(err))
	}
	if isPermission(err) {
		return fmt.Errorf("%w: %s %q: %w", ErrPermission, op, name, err)
	}
	if isTransient(err) {
		return fmt.Errorf("%w: %s %q: %w", ErrUnavailable, op, name, err)
	}
	return fmt.Errorf("dlock: %s %q: %w", op, name, err)
}

// transientReplies are the error replies of a Redis that cannot serve a
// command now but will once a slot has moved, a failover is over or a
// dataset is loaded.
var transientReplies = []string{"TRYAGAIN", "MOVED", "ASK", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "READONLY"}

// isTransient recognises an error that passes on its own (see
// [ErrUnavailable]): one of transientReplies, a server that refused or
// dropped the connection (a master killed, restarting, or failed over
// away from), or a Ring whose heartbeat found every shard down. A timeout
// is not one: it may be a server too slow for the load, which retrying
// would add to.
func isTransient(err error) bool {
	if err == nil {
		return false
	}
	for _, prefix := range transientReplies {
		if redis.HasErrorPrefix(err, prefix+" ") {
			return true
		}
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), ringShardsDown)
}

// ringShardsDown is a Ring's error when its heartbeat found every shard
// down: go-redis exports no sentinel for it.
const ringShardsDown = "redis: all ring shards are down"

// unavailable marks err with ErrUnavailable when it is transient.
func unavailable(err error) error {
	if isTransient(err) && !errors.Is(err, ErrUnavailable) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// isPermission recognises an ACL refusal: NOPERM for a command sent, and
// for one a script ran, Redis 7.0's words ("The user executing the script
// can't run this command") or Redis 8's and Valkey's ("ACL failure in
// script: …").
func isPermission(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "NOPERM") || strings.Contains(msg, "executing the script can't") ||
		strings.Contains(msg, "ACL failure in script") || strings.Contains(msg, "No permissions to access")
}

// isPublishRefused recognises a script's PUBLISH refused by an ACL that
// lacks the lock's channels, in Redis 7.0's words or later ones'.
func isPublishRefused(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "can't publish to the channel") || strings.Contains(msg, "No permissions to access a channel")
}

// wrongTypeDetail is what Redis said after WRONGTYPE, without where in
// which script: for a key dlock did not write, which key holds what.
func wrongTypeDetail(err error) string {
	_, detail, _ := strings.Cut(err.Error(), "WRONGTYPE ")
	detail, _, _ = strings.Cut(detail, " script:")
	return strings.TrimSuffix(detail, ".")
}

// isNoScript recognises a server that does not have a script (EVALSHA's
// NOSCRIPT) or dlock's function library (FCALL's "Function not found"):
// after SCRIPT FLUSH, FUNCTION FLUSH, a restart without its data, on a
// fresh server; see sendScripts.
func isNoScript(err error) bool {
	return err != nil && (strings.HasPrefix(err.Error(), "NOSCRIPT") || strings.HasPrefix(err.Error(), "ERR Function not found"))
}

// isWrongType recognises WRONGTYPE raised inside a script. Redis puts it at
// the start of the message; miniredis wraps it in a script error.
func isWrongType(err error) bool {
	return err != nil && strings.Contains(err.Error(), "WRONGTYPE")
}

// LossReason says how a lease was lost. It is an error in the chain of
// every lost lease's error, beside [ErrLeaseLost]: match one with
// errors.Is(err, dlock.LossTaken), or read it with errors.As(err, &reason).
// It is defined in package observe, whose [observe.LeaseEnd] carries it.
type LossReason = observe.LossReason

// The ways a lease is lost.
const (
	// LossExpired: the hold was gone from Redis when a renewal came: it
	// expired (the holder was stopped past its TTL, or a renewal was cut
	// off) or was deleted by something other than [Client.ForceUnlock].
	// Also where dlock cannot tell how a hold went: a refused Unlock or
	// TTL, and the lock types whose holds carry no owner to compare with
	// (a read-write lock's, a Semaphore's, a MultiLock's) or no mark of a
	// forced removal.
	LossExpired LossReason = observe.LossExpired

	// LossTaken: another owner holds the lock now. Its key was
	// overwritten: a program other than dlock wrote it, or dlock's own
	// hold went and another acquired it before this lease's renewal came.
	LossTaken LossReason = observe.LossTaken

	// LossForced: [Client.ForceUnlock] (`dlock unlock --force`) removed
	// the hold. Told for a Mutex's, FairMutex's or Election's hold, whose
	// removal leaves a mark naming its owner for as long as the hold had
	// left.
	LossForced LossReason = observe.LossForced

	// LossUnreachable: no renewal was confirmed before the lease's
	// deadline (Redis stalled, unreachable, or too slow; with
	// [WithReplicaAck], too few replicas confirmed them, or WAIT was
	// refused: an [observe.Observer]'s renewal events say which), or an
	// Unlock could not tell whether it released. Redis may still hold the
	// key until its TTL runs out.
	LossUnreachable LossReason = observe.LossUnreachable

	// LossUnknown is what an [observe.Observer] is told where none of
	// the above is known. No lost lease's error matches it.
	LossUnknown LossReason = observe.LossUnknown
)
