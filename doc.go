// Package dlock provides distributed locks on Redis, with fencing tokens,
// lock-loss notification and pub/sub wake-ups.
//
// A [Client] wraps a go-redis client (single server, Sentinel or Cluster).
// Each lock is a handle made by the Client, such as [Client.Mutex]; each
// acquisition returns a [Lease]:
//
//	mu := client.Mutex("orders:42")
//	lease, err := mu.Lock(ctx)
//	if err != nil {
//		return err
//	}
//	defer lease.Unlock(ctx)
//	ctx = lease.Context(ctx) // cancelled if the lock is lost
//	store.Write(ctx, lease.Token(), order) // the store refuses older tokens
//
// The types: [Mutex] (exclusive), [ReentrantMutex] (exclusive, re-entered
// by its owner, holds counted), [RWMutex] (many readers or one writer,
// reentrant, writer-preferring), [FairMutex] (exclusive, first come first
// served), [Semaphore] (N holders, a lease per permit), [MultiLock]
// (several locks, all or none, deadlock-free) and [Election] (one leader
// among candidates, observed by anyone). A [Redlock] holds a Mutex on a
// majority of independent masters; [WithReplicaAck] makes any acquisition
// wait for replicas.
//
// # Reentrancy follows the context
//
// A [ReentrantMutex] or [RWMutex] is reentrant, and Go has no goroutine id:
// the owner of a hold is the call chain, told by the context. Share one
// handle between goroutines as you would a sync.RWMutex: each Lock whose
// context carries no hold of the lock is a new owner and waits its turn. To
// re-enter, pass on the lease's context:
//
//	lease, err := rw.Lock(ctx)
//	if err != nil {
//		return err
//	}
//	defer lease.Unlock(ctx)
//	return update(lease.Context(ctx)) // update's own rw.Lock re-enters
//
// A context whose lease has ended carries no hold. [WithOwner] names an
// owner explicitly instead, for holds shared across processes.
//
// # Leases, and what a lock can promise
//
// A lock held in Redis is a lease: it lasts a TTL unless renewed, so that a
// crashed holder cannot keep it forever. Leases renew themselves every TTL/3
// (unless [WithLeaseTime] fixes their length) and report the end through
// [Lease.Done], [Lease.Err] and [Lease.Context]. A lease counts itself lost
// no later than Redis could hand the lock to someone else: at TTL × (1 −
// drift) after the last confirmed renewal was sent, by the monotonic or the
// wall clock, whichever ends first. A late grant is confirmed with an
// extension before it is returned.
//
// No lease can stop a holder that is paused (GC, swapping, a stopped VM)
// past its deadline from acting on a resource it no longer holds. Fencing
// tokens make that safe: [Lease.Token] strictly increases with each new hold
// of a name, so the resource can reject a write carrying a token lower than
// the highest it has seen.
//
// # Waiting
//
// A blocked Lock does not poll. Each Client keeps one subscriber connection
// (one per shard on a Redis 7 cluster). A waiter subscribes, then makes the
// attempt that, if refused, registers it in the same script, so no release
// slips between attempt and wait. A [Mutex]'s or [FairMutex]'s release
// hands the lock itself to one registered waiter, in whichever client, so
// neither the releaser nor a newcomer can barge in; the other types'
// releases wake one waiter, which tries again. Waiters refresh their
// registration every second ([WithWaiterRefresh]); a dead one stops being
// picked within three refreshes. Without pub/sub, waiters retry when the
// holder's TTL runs out.
//
// # Redis
//
// Every operation is one Lua script (in internal/scripts), one round trip.
// All keys of one lock share the hash tag {name}: with the default prefix
// the lock "orders:42" lives in "dlock:{orders:42}", its fencing counter in
// "dlock:{orders:42}:fence", and it publishes on "dlock:{orders:42}:wake".
//
// # Contexts
//
// Every call that talks to Redis takes a context. go-redis honours a
// context's deadline on the socket only when the client is created with
// ContextTimeoutEnabled; otherwise a call on a stalled server waits for the
// client's ReadTimeout. Enable it for contexts to bound each round trip.
// Unlock, and the clean-up after a failed acquire, deliberately outlive a
// cancelled context (bounded by [CleanupTimeout]).
//
// # Observing locks
//
// [WithObserver] sets an [observe.Observer]: functions told of each acquire
// and its outcome, the steps of a wait, renewals, releases and losses. The
// module github.com/dlockio/dlock/dlockotel makes OpenTelemetry metrics and
// spans of them. Unset, it costs nothing.
//
// # Operating locks
//
// [Client.Describe] tells who holds a lock and who waits, [Client.ForceUnlock]
// removes a lock whose holder is gone, and [Client.Check] finds what in a
// server's configuration weakens the locks. Package admin holds the types
// of their answers ([admin.LockInfo], [admin.Report]) and [admin.HolderInfo],
// which [WithHolderInfo] stores for them to show. The dlock command is
// built on them.
//
// # Errors
//
// Errors match the sentinels [ErrNotAcquired], [ErrNotHeld], [ErrLeaseLost],
// [ErrWrongType], [ErrInvalid], [ErrUpgrade], [ErrPermits], [ErrNoLeader],
// [ErrReplicaAck], [ErrPermission], [ErrUnavailable] and [ErrClosed] with
// [errors.Is]; a lost lease's error also matches its [LossReason]
// ([LossExpired], [LossTaken], [LossForced], [LossUnreachable]); a
// Redlock's failures are a [*QuorumError] of [*NodeError] values. Bad
// input is reported before anything is sent to Redis.
//
// # More
//
// docs/SAFETY.md in the repository says what dlock promises under faults,
// and which test shows each promise; docs/ARCHITECTURE.md how it works.
package dlock
