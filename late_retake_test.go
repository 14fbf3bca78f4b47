package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/scripts"
)

// errRenewalBlocked is what failRenewals answers for a renewal it keeps
// from the server.
var errRenewalBlocked = errors.New("test: the renewal did not get through")

// failRenewals is a go-redis hook that keeps every command running script
// (a lease's renewal) from the server, as a stalled link would: the lease
// is lost at its deadline, and its hold in Redis expires with its TTL.
type failRenewals struct{ script *redis.Script }

func (h failRenewals) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h failRenewals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if runs(cmd, h.script) {
			cmd.SetErr(errRenewalBlocked)
			return errRenewalBlocked
		}
		return next(ctx, cmd)
	}
}

func (h failRenewals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		kept := cmds[:0:0]
		for _, cmd := range cmds {
			if runs(cmd, h.script) {
				cmd.SetErr(errRenewalBlocked)
				continue
			}
			kept = append(kept, cmd)
		}
		if len(kept) == 0 {
			return errRenewalBlocked
		}
		return next(ctx, kept)
	}
}

// taker is how a lock type takes a hold of name.
type taker func(c *dlock.Client, name string, opts ...dlock.Option) func(context.Context) (*dlock.Lease, error)

// retakers are the lock types whose release tells a hold taken anew since
// its grant (every kind on a Client's server); each with the scripts that
// grant, renew and release it, and, where another hold of its own kind
// would not wait for it (a read), what another holder takes in between.
var retakers = func() []retaker {
	var types []retaker
	for _, k := range serverKinds() {
		r := retaker{k.Label(), k.Scripts.Acquire, k.Scripts.Extend, k.Scripts.Release, lockOn(k, 1, pairOf), nil}
		if h := holderOf(k); h != nil {
			r.between = lockOn(*h, 1, pairOf)
		}
		types = append(types, r)
	}
	return types
}()

type retaker struct {
	name                     string
	acquire, extend, release *redis.Script
	take                     taker
	between                  taker // nil: take
}

// A copy of the attempt that granted a lease (its first copy held up on
// the network while go-redis's resend was answered) lands after the lease
// was lost, the lock expired, another holder took it and let it go: it
// takes the lock anew for the lost lease's owner. The lease's Unlock then
// found it its own and returned nil, as if the hold had lasted from the
// grant, though another held the lock in between (found by the explorer's
// linearizable check on a MultiLock: seed 1795707226476121189, a frozen
// holder). The Unlock releases what the copy took, and says the hold did
// not last.
func TestLateAttempt_OfAGrantRetakingAfterTheLeaseWasLostIsNotUnlockedAsHeld(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, lt := range retakers {
			t.Run(lt.name, func(t *testing.T) {
				ctx := ctxFor(t, 30*time.Second)
				name := lockName(t)
				other := b.newRedis(t)
				rdb := b.newRedis(t)
				copies := &copier{script: lt.acquire}
				rdb.AddHook(copies)
				rdb.AddHook(failRenewals{lt.extend})

				lease, err := lt.take(newClient(t, rdb), name, dlock.WithTTL(300*time.Millisecond))(ctx)
				if err != nil {
					t.Fatal(err)
				}
				granted := copies.sent()
				waitDone(t, lease.Done(), 10*time.Second, "the loss of the lease whose renewals fail")
				if !errors.Is(lease.Err(), dlock.ErrLeaseLost) {
					t.Fatalf("lease ended with %v, want ErrLeaseLost", lease.Err())
				}

				// Another waits out the hold's TTL, takes the lock, lets it go.
				between := lt.between
				if between == nil {
					between = lt.take
				}
				second, err := between(newClient(t, other), name)(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := second.Unlock(ctx); err != nil {
					t.Fatal(err)
				}

				// The copies of the granting attempt land now.
				for _, args := range granted {
					if err := other.Do(ctx, args...).Err(); err != nil {
						t.Fatalf("late copy: %v", err)
					}
				}

				if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
					t.Fatalf("Unlock of a lost lease whose lock another held since, retaken by a late copy of its grant: %v, want ErrNotHeld", err)
				}
				expectNothingLeft(t, ctx, other, name, "after the Unlock")
				expectNothingLeft(t, ctx, other, name+"-b", "after the Unlock")
			})
		}
	})
}

// An Unlock's release is applied and its reply lost; a copy of the attempt
// that granted the lease (its first copy held up on the network) lands
// then, and takes the free lock anew for the lease's owner; go-redis's
// resend of the release arrives after it. The hold lasted from its grant
// to the release, whose mark the resend would find: the resend's answer,
// the one the Unlock reads, must say released, and the resend lets go of
// what the late copy took.
func TestLateAttempt_RetakingBetweenAReleaseAndItsResendDoesNotMakeItNotHeld(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, lt := range retakers {
			t.Run(lt.name, func(t *testing.T) {
				ctx := ctxFor(t, 30*time.Second)
				name := lockName(t)
				other := b.newRedis(t)
				rdb := b.newRedis(t)
				acquires, release := &copier{script: lt.acquire}, &copier{script: lt.release}
				rdb.AddHook(acquires)
				rdb.AddHook(release)

				lease, err := lt.take(newClient(t, rdb), name)(ctx)
				if err != nil {
					t.Fatal(err)
				}
				granted := acquires.sent()
				if err := lease.Unlock(ctx); err != nil { // the first copy of the release: its reply is the one lost
					t.Fatal(err)
				}
				for _, args := range granted { // the late copies of the granting attempt
					if err := other.Do(ctx, args...).Err(); err != nil {
						t.Fatalf("late copy: %v", err)
					}
				}
				for _, args := range release.sent() { // go-redis's resend of the release
					n, err := other.Do(ctx, args...).Int64()
					if err != nil {
						t.Fatalf("resent release: %v", err)
					}
					if n != 1 {
						t.Fatalf("resent release of a hold that lasted until its release, after a late copy of its grant took the lock anew: %d, want 1 (the Unlock would say ErrNotHeld)", n)
					}
				}
				expectNothingLeft(t, ctx, other, name, "after the resent release")
				expectNothingLeft(t, ctx, other, name+"-b", "after the resent release")
			})
		}
	})
}

// A hold of a ReentrantMutex's owner lapses while another of the same
// owner lasts, and a late copy of the attempt that granted it takes it
// again: the owner's other hold kept every other owner out all along,
// and the copy's hold shares its token. The lapsed lease's Unlock
// releases it and answers nil, as Lease.Unlock says, and the other hold
// still holds.
func TestLateAttempt_RetakingWhileTheOwnersOtherHoldLastedIsUnlockedAsHeld(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, 30*time.Second)
		name := lockName(t)
		other := b.newRedis(t)
		rdb := b.newRedis(t)
		copies := &copier{script: scripts.RWAcquire}
		rdb.AddHook(copies)
		rdb.AddHook(failRenewals{scripts.RWExtend})
		owner := dlock.WithOwner("owner-" + name)

		lapsing, err := newClient(t, rdb).ReentrantMutex(name, owner, dlock.WithTTL(300*time.Millisecond)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		granted := copies.sent()
		lasting, err := newClient(t, other).ReentrantMutex(name, owner).Lock(ctx) // the same owner: a re-entry
		if err != nil {
			t.Fatal(err)
		}
		waitDone(t, lapsing.Done(), 10*time.Second, "the loss of the lease whose renewals fail")
		if !errors.Is(lapsing.Err(), dlock.ErrLeaseLost) {
			t.Fatalf("lease ended with %v, want ErrLeaseLost", lapsing.Err())
		}
		describer := newClient(t, other)
		holds := func() int {
			info, err := describer.Describe(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if len(info.Holders) != 1 {
				t.Fatalf("holders %+v, want the one owner", info.Holders)
			}
			return info.Holders[0].Holds
		}
		eventually(t, ctx, "the lapsed hold's expiry in Redis", func() bool { return holds() == 1 })
		for _, args := range granted {
			if err := other.Do(ctx, args...).Err(); err != nil {
				t.Fatalf("late copy: %v", err)
			}
		}
		if n := holds(); n != 2 {
			t.Fatalf("the late copy took %d holds, want the lapsed one again beside the other", n-1)
		}

		if err := lapsing.Unlock(ctx); err != nil {
			t.Fatalf("Unlock of a hold retaken while its owner's other hold lasted: %v, want nil", err)
		}
		if n := holds(); n != 1 || lasting.Err() != nil {
			t.Fatalf("after the Unlock: %d holds, the other lease's end %v; want the other hold alone, held", n, lasting.Err())
		}
		if err := lasting.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		expectNothingLeft(t, ctx, other, name, "after both Unlocks")
	})
}
