package dlock

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/observe"
)

// Sentinel errors: dlock's errors wrap them with detail; match them with
// [errors.Is]. A wait ended by its context also matches the context's error.
var (
	// ErrNotAcquired: the lock is held by someone else, and the call did not
	// (or was not allowed to) wait for it.
	ErrNotAcquired = errors.New("dlock: not acquired")

	// ErrNotHeld: an Unlock, Extend or TTL of a hold that is not ours: already
	// released, expired, deleted, or held by another owner.
	ErrNotHeld = errors.New("dlock: not held")

	// ErrLeaseLost: a lease ended unreleased (a renewal refused, its deadline
	// passed): another owner may hold the lock. It matches a [LossReason] too.
	ErrLeaseLost = errors.New("dlock: lease lost")

	// ErrWrongType: a key of the lock holds what another lock type or
	// program wrote. The error names the key; dlock leaves it untouched.
	ErrWrongType = errors.New("dlock: key holds the wrong type of value")

	// ErrInvalid: bad input (an empty name, a TTL below [MinTTL]…). Returned
	// before anything is sent to Redis.
	ErrInvalid = errors.New("dlock: invalid argument")

	// ErrUpgrade: an owner holding only read locks of an [RWMutex] asked for
	// the write lock. Two readers waiting so would deadlock.
	ErrUpgrade = errors.New("dlock: read lock held: cannot upgrade to a write lock")

	// ErrPermits: a [Semaphore] opened with a number of permits other than
	// its name has in Redis; change it with [Semaphore.SetPermits].
	ErrPermits = errors.New("dlock: semaphore has another number of permits")

	// ErrNoLeader: an [Election] that nobody leads right now.
	ErrNoLeader = errors.New("dlock: no leader")

	// ErrReplicaAck: fewer replicas confirmed than [WithReplicaAck] asks for.
	// An acquisition's hold was released; an Extend's lease keeps its
	// deadline (or the Extend's, if sooner); a renewal is tried again.
	ErrReplicaAck = errors.New("dlock: too few replicas acknowledged the lock")

	// ErrPermission: Redis refused a command, key or channel by ACL. The
	// README lists what to grant. Never reported as [ErrNotAcquired].
	ErrPermission = errors.New("dlock: permission denied by Redis")

	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("dlock: client closed")

	// ErrUnavailable: Redis could not serve the call for a passing reason
	// (a slot migrating, a failover, a restart, no server at the address);
	// the cause stays in the chain. An acquisition failing so holds nothing.
	// A waiting Lock retries until its context ends, then returns this error
	// with the context's, never [ErrNotAcquired]; other calls return at once.
	ErrUnavailable = errors.New("dlock: Redis temporarily unavailable")
)

// notAcquired names the lock and, if known, the most its holder has left.
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
	switch {
	case isWrongType(err):
		return fmt.Errorf("%w: lock %q: %s", ErrWrongType, name, wrongTypeDetail(err))
	case fcall.IsPermission(err):
		return fmt.Errorf("%w: %s %q: %w", ErrPermission, op, name, err)
	case isTransient(err):
		return fmt.Errorf("%w: %s %q: %w", ErrUnavailable, op, name, err)
	}
	return fmt.Errorf("dlock: %s %q: %w", op, name, err)
}

// transientReplies are the replies of a Redis that will serve the command
// once a slot moved, a failover ended or a dataset loaded.
var transientReplies = []string{"TRYAGAIN", "MOVED", "ASK", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "READONLY"}

// isTransient recognises an error that passes on its own. A timeout is not
// one: retrying would add to the load of a server too slow for it.
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
		strings.Contains(err.Error(), "redis: all ring shards are down") // a Ring's, with no sentinel
}

// unavailable marks err with ErrUnavailable when it is transient.
func unavailable(err error) error {
	if isTransient(err) && !errors.Is(err, ErrUnavailable) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// isPublishRefused recognises a script's PUBLISH refused by an ACL.
func isPublishRefused(err error) bool {
	return fcall.ErrSays(err, "can't publish to the channel", "No permissions to access a channel")
}

// wrongTypeDetail is what Redis said after WRONGTYPE, without the script.
func wrongTypeDetail(err error) string {
	_, detail, _ := strings.Cut(err.Error(), "WRONGTYPE ")
	detail, _, _ = strings.Cut(detail, " script:")
	return strings.TrimSuffix(detail, ".")
}

// isWrongType recognises WRONGTYPE raised inside a script. Redis puts it at
// the start of the message; miniredis wraps it in a script error.
func isWrongType(err error) bool { return fcall.ErrSays(err, "WRONGTYPE") }

// LossReason says how a lease was lost: every lost lease's error matches
// one, beside [ErrLeaseLost] (errors.Is(err, dlock.LossTaken)).
type LossReason = observe.LossReason

// The ways a lease is lost.
const (
	// LossExpired: the hold was gone when a renewal came, expired or deleted
	// (not by [Client.ForceUnlock]), or dlock cannot tell how it went.
	LossExpired LossReason = observe.LossExpired

	// LossTaken: another owner holds the lock now.
	LossTaken LossReason = observe.LossTaken

	// LossForced: [Client.ForceUnlock] removed the hold (told for a Mutex,
	// FairMutex or Election).
	LossForced LossReason = observe.LossForced

	// LossUnreachable: no renewal was confirmed before the deadline, or an
	// Unlock could not tell if it released; the key may live out its TTL.
	LossUnreachable LossReason = observe.LossUnreachable

	// LossUnknown is what an [observe.Observer] is told where none of the
	// above is known. No lost lease's error matches it.
	LossUnknown LossReason = observe.LossUnknown
)
