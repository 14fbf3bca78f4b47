// Package dlock provides distributed locks on Redis. Each acquisition is a
// lease with a fencing token, and its loss is a value the caller can select
// on.
//
// A [Client] wraps a go-redis client (single server, Sentinel, Cluster or
// Ring). Each lock is a handle made by the Client, such as [Client.Mutex];
// each acquisition returns a [Lease]:
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
// # The contract
//
//   - A lease lasts a TTL unless renewed. It renews itself every TTL/3
//     (unless [WithLeaseTime] fixes its length) and reports its end through
//     [Lease.Done], [Lease.Err] and [Lease.Context]. It counts itself lost
//     no later than Redis could hand the lock to someone else: at TTL × (1 −
//     drift) after the last confirmed renewal was sent, by the monotonic or
//     the wall clock, whichever ends first.
//   - No lease can stop a paused holder (GC, a stopped VM) from acting past
//     its deadline. Fencing makes that safe: [Lease.Token] strictly
//     increases with each new hold of a name, so the resource can refuse a
//     token lower than the highest it has seen.
//   - Every call that talks to Redis takes a context. Unlock, and the
//     clean-up after a failed acquire, outlive a cancelled context, bounded
//     by [CleanupTimeout]. go-redis cuts a round trip short at the context's
//     deadline only when created with ContextTimeoutEnabled.
//   - Bad input fails before anything is sent, matching [ErrInvalid].
//     Errors match sentinels with [errors.Is] ([ErrNotAcquired],
//     [ErrLeaseLost]…); a lost lease's error also matches its [LossReason];
//     a wait that ends with its context matches both [ErrNotAcquired] and
//     the context's error.
//   - Redis must not evict keys (maxmemory-policy noeviction): each Client
//     checks its nodes and logs what weakens the locks ([Client.Check]).
//
// # The types
//
// [Mutex] (exclusive), [ReentrantMutex] (exclusive, reentrant), [RWMutex]
// (readers or one writer, reentrant), [FairMutex] (first come, first
// served), [Semaphore] (N holders), [MultiLock] (all or none) and
// [Election] (one leader). A [Redlock] holds a Mutex on a majority of
// independent masters; [WithReplicaAck] makes any acquisition wait for
// replicas. A waiting Lock does not poll: a release wakes a waiter by
// pub/sub, or hands it the lock.
//
// # Reentrancy follows the context
//
// Go has no goroutine id: a [ReentrantMutex] or [RWMutex] hold is owned by
// the call chain, told by the context ([WithOwner] names an owner instead).
// A Lock whose context carries no live hold of the lock is a new owner and
// waits its turn. To re-enter, pass on the lease's context:
//
//	lease, err := rw.Lock(ctx)
//	if err != nil {
//		return err
//	}
//	defer lease.Unlock(ctx)
//	return update(lease.Context(ctx)) // update's own rw.Lock re-enters
//
// # More
//
// [WithObserver] sets an [observe.Observer] (dlockotel makes OpenTelemetry
// of it). [Client.Describe], [Client.ForceUnlock] and [Client.Check] are for
// operators; package admin holds their answers. In the repository,
// docs/SAFETY.md says what dlock promises under faults and which test shows
// it, and docs/ARCHITECTURE.md how it works.
package dlock
