package dlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// A frozen server answers no renewal: the lease says it is at risk, by its
// own clock, while it still counts itself held, and only later that it is
// lost, for want of a reachable Redis.
func TestLease_AtRiskFiresBeforeDoneWhenTheServerIsStopped(t *testing.T) {
	srv := startServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := ctxFor(t, 30*time.Second)
	lease, err := newClient(t, rdb, dlock.WithTTL(time.Second)).Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	t.Cleanup(srv.Resume)
	waitDone(t, lease.AtRisk(), lossGuard, "AtRisk while the server is frozen")
	select {
	case <-lease.Done():
		t.Fatalf("Done closed by the time AtRisk was: %v", lease.Err())
	default:
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("Err while at risk: %v, want nil: the lease still holds", err)
	}
	waitDone(t, lease.Done(), lossGuard, "loss of the lease while the server is frozen")
	expectLoss(t, lease.Err(), dlock.LossUnreachable)
}

// A lease whose renewals go through is never at risk.
func TestLease_RenewedLeaseIsNotAtRisk(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	ttl := 300 * time.Millisecond
	lease, err := newClient(t, backends[0].newRedis(t), dlock.WithTTL(ttl)).Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(ctx)
	first := lease.Deadline()
	// Past the first deadline: every risk point of the first TTL has passed.
	eventually(t, ctx, "renewals carrying the lease past its first deadline", func() bool {
		return time.Now().After(first.Add(ttl/2)) && lease.Err() == nil
	})
	select {
	case <-lease.AtRisk():
		t.Fatal("AtRisk closed on a lease whose renewals went through")
	default:
	}
}

// Each way a hold can go from under its lease is told apart, and every one
// is still ErrLeaseLost.
func TestLease_LossReasonSaysHowTheHoldWent(t *testing.T) {
	admin := backends[0].newRedis(t)
	cases := []struct {
		name   string
		remove func(t *testing.T, name string)
		want   dlock.LossReason
	}{
		{"deleted", func(t *testing.T, name string) {
			admin.Del(t.Context(), lockKey(name))
		}, dlock.LossExpired},
		{"forced", func(t *testing.T, name string) {
			if _, err := newClient(t, admin).ForceUnlock(t.Context(), name); err != nil {
				t.Fatal(err)
			}
		}, dlock.LossForced},
		{"taken", func(t *testing.T, name string) {
			admin.Set(t.Context(), lockKey(name), strings.Repeat("ab", 16), time.Minute)
		}, dlock.LossTaken},
		{"forced then taken", func(t *testing.T, name string) {
			if _, err := newClient(t, admin).ForceUnlock(t.Context(), name); err != nil {
				t.Fatal(err)
			}
			next, err := newClient(t, admin).Mutex(name).TryLock(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = next.Unlock(t.Context()) })
		}, dlock.LossForced},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t, 30*time.Second)
			name := lockName(t)
			lease, err := newClient(t, backends[0].newRedis(t), dlock.WithTTL(300*time.Millisecond)).Mutex(name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			tc.remove(t, name)
			waitDone(t, lease.Done(), lossGuard, "the loss found by a renewal")
			expectLoss(t, lease.Err(), tc.want)
			if tc.want != dlock.LossUnreachable {
				select {
				case <-lease.AtRisk():
				default:
					t.Fatal("AtRisk still open once the lease is lost")
				}
			}
		})
	}
}

// expectLoss checks that err is a lease's loss for reason, readable both
// ways.
func expectLoss(t *testing.T, err error, reason dlock.LossReason) {
	t.Helper()
	if !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Err: %v, want ErrLeaseLost", err)
	}
	if !errors.Is(err, reason) {
		t.Fatalf("Err: %v, want reason %v", err, reason)
	}
	var got dlock.LossReason
	if !errors.As(err, &got) || got != reason {
		t.Fatalf("errors.As reason: %v, want %v (err %v)", got, reason, err)
	}
}

// A MultiLock across cluster slots is at risk as soon as one of its parts
// is: here the part on a frozen master, while the lease still holds.
func TestLease_MultiLockAtRiskWhenAPartIs(t *testing.T) {
	cl := redistest.StartCluster(t, "--cluster-require-full-coverage", "no")
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb, dlock.WithTTL(time.Second))
	ctx := ctxFor(t, 60*time.Second)
	nameOn := func(node int) string {
		for {
			name := lockName(t)
			owner, err := cl.SlotOwner(ctx, dlock.ClusterSlot(name))
			if err != nil {
				t.Fatal(err)
			}
			if owner == node {
				return name
			}
		}
	}
	lease, err := c.MultiLock([]string{nameOn(0), nameOn(1)}).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cl.Nodes[1].Pause()
	t.Cleanup(cl.Nodes[1].Resume)
	waitDone(t, lease.AtRisk(), lossGuard, "AtRisk of the MultiLock with a part on a frozen master")
	if err := lease.Err(); err != nil {
		t.Fatalf("Err while at risk: %v, want nil", err)
	}
	waitDone(t, lease.Done(), lossGuard, "loss of the MultiLock")
	expectLoss(t, lease.Err(), dlock.LossUnreachable)
}
