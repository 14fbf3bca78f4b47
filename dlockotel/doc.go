// Package dlockotel makes OpenTelemetry metrics and spans of what happens to
// dlock's locks: an [observe.Observer] that records them.
//
//	obs, err := dlockotel.NewObserver() // the global MeterProvider and TracerProvider
//	if err != nil {
//		return err
//	}
//	locks, err := dlock.New(rdb, dlock.WithObserver(obs))
//
// # Metrics
//
// Durations are in seconds; counts carry a unit in braces, as the
// OpenTelemetry semantic conventions have it. Every instrument has the
// attribute dlock.kind (mutex, reentrant, rw.read, rw.write, fair,
// semaphore, multi, election, redlock), and dlock.lock.group where
// [WithLockGroup] gives one: lock names are never attributes by default,
// since there can be any number of them.
//
//   - dlock.acquire.duration (histogram, s): each acquire call (TryLock,
//     Lock, RLock, Acquire, Campaign…) from its start to its return, by
//     dlock.outcome: acquired, not_acquired (refused, or the wait ran
//     out), canceled (the caller's context), error (with error.type).
//   - dlock.hold.duration (histogram, s): each lease from its acquire's
//     return to its end, by dlock.release.reason: released, or lost_expired,
//     lost_taken, lost_forced, lost_unreachable, lost_unknown.
//   - dlock.held (up-down counter, {lease}): leases held now.
//   - dlock.waiting (up-down counter, {call}): acquire calls registered as
//     waiters now.
//   - dlock.lease.renewals (counter, {renewal}): automatic renewals, by
//     dlock.renewal.result: ok, refused (the lease is lost), failed (tried
//     again until the deadline).
//   - dlock.lease.margin (histogram, s): the time a lease had left when a
//     renewal was confirmed. About two thirds of the TTL when all is well;
//     a margin falling toward zero is the early warning of a loss.
//   - dlock.lease.lost (counter, {lease}): leases lost, by dlock.loss.reason:
//     expired, taken, forced, unreachable, unknown.
//   - dlock.lease.extensions (counter, {extension}): calls of Lease.Extend,
//     by dlock.extension.result (as renewals').
//   - dlock.handover.duration (histogram, s): from the start of a release to
//     the next holder holding, where this process sees both ends: the
//     release by one of its leases, the acquisition by one of its waiting
//     calls.
//   - dlock.election.leader (up-down counter, {leadership}): 1 while this
//     process leads an election (per group), 0 after.
//
// # Spans
//
// dlock.acquire spans each acquire call, with dlock.kind, dlock.try, and
// at its end dlock.outcome, dlock.waited and, once acquired,
// dlock.fencing_token; its events are dlock.wait.registered,
// dlock.wait.handed_over and dlock.wait.retry. dlock.release spans each
// Unlock (and Resign). The Redis commands a call sends are sent with the
// span's context, so go-redis's own instrumentation (redisotel) nests
// under it. Per-command metrics are left to that instrumentation: this
// package measures locks, not commands.
//
// Owner tokens, the secrets that prove a hold, never reach this package;
// fencing tokens are attributes of spans only. redisotel records every
// command's arguments, owner tokens among them, as db.statement: use
// redisotel.WithDBStatement(false) beside dlock.
package dlockotel
