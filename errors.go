package dlock

import (
	"errors"
	"fmt"
	"strings"
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
	// then on another owner may hold the lock.
	ErrLeaseLost = errors.New("dlock: lease lost")

	// ErrWrongType: the lock's key holds a Redis value of another type, not
	// written by this kind of lock. dlock leaves such a key untouched.
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

	// ErrReplicaAck: an acquisition that fewer replicas confirmed than
	// [WithReplicaAck] asks for. The hold was released.
	ErrReplicaAck = errors.New("dlock: too few replicas acknowledged the lock")

	// ErrPermission: Redis refused a command for lack of permission (ACL):
	// the user dlock logs in as may not run one of the commands dlock needs,
	// or not on that key or channel. The README lists what to grant. Never
	// reported as [ErrNotAcquired].
	ErrPermission = errors.New("dlock: permission denied by Redis")

	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("dlock: client closed")
)

var errUnexpectedReply = errors.New("unexpected reply from Redis")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// redisError classifies an error from a script run on the lock name's keys.
func redisError(op, name string, err error) error {
	if isWrongType(err) {
		return fmt.Errorf("%w: lock %q (%s)", ErrWrongType, name, op)
	}
	if isPermission(err) {
		return fmt.Errorf("%w: %s %q: %w", ErrPermission, op, name, err)
	}
	return fmt.Errorf("dlock: %s %q: %w", op, name, err)
}

// isPermission recognises an ACL refusal: NOPERM for a command sent, and
// Redis 7.0's own words for one a script ran.
func isPermission(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "NOPERM") || strings.Contains(msg, "can't run this command") ||
		strings.Contains(msg, "No permissions to access")
}

// isWrongType recognises WRONGTYPE raised inside a script. Redis puts it at
// the start of the message; miniredis wraps it in a script error.
func isWrongType(err error) bool {
	return err != nil && strings.Contains(err.Error(), "WRONGTYPE")
}
