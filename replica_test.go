package dlock_test

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/family"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/observe"
)

// The lost-lock recipe: the replica falls behind, a lock is taken on the
// master, the master dies and the replica is promoted without the lock.
// Without replica acknowledgement a second client gets the lock and the
// first lease finds out at its next renewal; with it, the first acquisition
// fails instead of being lost.
func TestReplicaAck_FailoverLosesOnlyUnacknowledgedLocks(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second // renewed every second
	for _, ack := range []bool{false, true} {
		t.Run(map[bool]string{false: "without ack", true: "with ack"}[ack], func(t *testing.T) {
			f := redistest.StartFailover(t)
			ctx := ctxFor(t, time.Minute)
			name := lockName(t)
			opts := []dlock.Option{dlock.WithTTL(ttl)}
			if ack {
				opts = append(opts, dlock.WithReplicaAck(1, 300*time.Millisecond))
				// With the replica keeping up, acquisitions are acknowledged.
				lease, err := newClient(t, f.Client(), opts...).Mutex(lockName(t)).Lock(ctx)
				if err != nil {
					t.Fatalf("Lock with a live replica: %v", err)
				}
				if err := lease.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			first := newClient(t, f.Client(), opts...).Mutex(name)

			// The replica falls behind: stopped, and its link cut, so that
			// what the master writes next cannot reach it even from the
			// socket's buffers once it runs again.
			f.Replica.Pause()
			if err := f.Master.Client().ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
				t.Fatal(err)
			}
			lease, err := first.Lock(ctx)
			if ack {
				f.Replica.Resume()
				if !errors.Is(err, dlock.ErrReplicaAck) {
					t.Fatalf("Lock with the replica stopped: %v, %v; want ErrReplicaAck", lease, err)
				}
				if n := f.Master.Client().Exists(ctx, lockKey(name)).Val(); n != 0 {
					t.Fatal("the unacknowledged lock was not released")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			f.Master.Kill()
			f.Replica.Resume()
			if err := f.Promote(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := newClient(t, f.Client()).Mutex(name).TryLock(ctx); err != nil {
				t.Fatalf("a second client after the failover: %v; the lock should have been lost with the master", err)
			}
			waitDone(t, lease.Done(), lossGuard, "the first lease noticing the loss")
			if !errors.Is(lease.Err(), dlock.ErrLeaseLost) {
				t.Fatalf("the first lease ended with %v; want ErrLeaseLost", lease.Err())
			}
		})
	}
}

func TestReplicaAck_WithoutReplicasFailsAndReleases(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		rdb := b.newRedis(t)
		c := newClient(t, rdb, dlock.WithReplicaAck(1, 50*time.Millisecond))
		name := lockName(t)
		if _, err := c.Mutex(name).Lock(ctx); !errors.Is(err, dlock.ErrReplicaAck) {
			t.Fatalf("Lock with no replica to acknowledge: %v; want ErrReplicaAck", err)
		}
		for _, k := range serverKinds() {
			if _, err := k.Take(ctx, family.Target{Client: c}, namesOf(k, lockName(t)), false); !errors.Is(err, dlock.ErrReplicaAck) {
				t.Fatalf("%s with no replica to acknowledge: %v; want ErrReplicaAck", k.Label(), err)
			}
		}
		if _, err := newClient(t, rdb).Mutex(name).TryLock(ctx); err != nil {
			t.Fatalf("the unacknowledged lock was kept: %v", err)
		}
		if _, err := dlock.New(rdb, dlock.WithReplicaAck(1, 0)); !errors.Is(err, dlock.ErrInvalid) {
			t.Fatalf("replica ack without a timeout: %v; want ErrInvalid", err)
		}
	})
}

// With replica acks the acquire and WAIT go to the key's master directly,
// not through the cluster client: after a resharding (or a failover) the
// node that answers MOVED must be followed there, not returned as an error.
func TestReplicaAck_FollowsAClusterRedirection(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	ctx := ctxFor(t, time.Minute)
	rdb := c.Client()
	mu := newClient(t, rdb, dlock.WithReplicaAck(1, 20*time.Millisecond)).Mutex(lockName(t))
	// The client learns the layout; with no replicas, no ack comes.
	if _, err := mu.TryLock(ctx); !errors.Is(err, dlock.ErrReplicaAck) {
		t.Fatalf("TryLock: %v; want ErrReplicaAck", err)
	}
	slot := int(rdb.ClusterKeySlot(ctx, lockKey(mu.Name())).Val())
	owner, err := c.SlotOwner(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MigrateSlot(ctx, slot, (owner+1)%len(c.Nodes), nil); err != nil {
		t.Fatal(err)
	}
	// The old owner answers MOVED; the new one runs the script and WAIT.
	if _, err := mu.TryLock(ctx); !errors.Is(err, dlock.ErrReplicaAck) {
		t.Fatalf("TryLock after the slot moved: %v; want ErrReplicaAck from the new owner", err)
	}
	expectFree(t, ctx, rdb, mu.Name())
}

// With replica acks a lease counts only on what a replica confirmed: a
// renewal or an Extend applied on the master but not yet on its replica
// must not move the lease's deadline, or a failover to that replica ends
// the hold while its holder still counts on it, and a second client takes
// the lock before the first lease's deadline. While the replica keeps up,
// renewals are confirmed as usual.
func TestReplicaAck_ADeadlineTheReplicaMissedIsNotCountedOn(t *testing.T) {
	t.Parallel() // waits on servers and timers of its own, not on the CPU

	const ttl = 3 * time.Second // renewed every second
	for _, how := range []string{"renewal", "extend"} {
		t.Run(how, func(t *testing.T) {
			f := redistest.StartFailover(t)
			ctx := ctxFor(t, time.Minute)
			name := lockName(t)
			renewals, observed := renewalsSeen()
			nextRenewal := func() observe.RenewalEvent {
				select {
				case ev := <-renewals:
					return ev
				case <-ctx.Done():
					t.Fatal("no renewal answered")
					return observe.RenewalEvent{}
				}
			}
			lease, err := newClient(t, f.Client(), dlock.WithTTL(ttl), dlock.WithReplicaAck(1, 200*time.Millisecond),
				observed).Mutex(name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ev := nextRenewal(); ev.Result != observe.RenewalOK {
				t.Fatalf("a renewal with the replica keeping up: %s, %v", ev.Result, ev.Err)
			}
			// The replica falls behind, its link cut (see above).
			f.Replica.Pause()
			if err := f.Master.Client().ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
				t.Fatal(err)
			}
			if how == "renewal" {
				if ev := nextRenewal(); !errors.Is(ev.Err, dlock.ErrReplicaAck) {
					t.Fatalf("a renewal with the replica stopped: %s, %v; want ErrReplicaAck", ev.Result, ev.Err)
				}
			} else if err := lease.Extend(ctx, 10*ttl); !errors.Is(err, dlock.ErrReplicaAck) {
				t.Fatalf("Extend with the replica stopped: %v; want ErrReplicaAck", err)
			}
			counted := lease.Deadline()
			f.Master.Kill()
			f.Replica.Resume()
			if err := f.Promote(ctx); err != nil {
				t.Fatal(err)
			}
			ms, err := f.Replica.Client().Do(ctx, "pexpiretime", lockKey(name)).Int64()
			if err != nil {
				t.Fatal(err)
			}
			kept := time.UnixMilli(ms)
			if ms == -2 { // expired on the new master already
				kept = time.Now()
			}
			if counted.After(kept) {
				t.Fatalf("the lease counts on its hold until %v, but the promoted replica keeps it until %v",
					counted.Format("15:04:05.000"), kept.Format("15:04:05.000"))
			}
			// The new master has no replica: no renewal is confirmed, and
			// the lease ends at its deadline, as WithReplicaAck's doc says.
			waitDone(t, lease.Done(), lossGuard, "the lease ending with no replica to confirm its renewals")
			if !errors.Is(lease.Err(), dlock.LossUnreachable) {
				t.Fatalf("the lease ended with %v; want LossUnreachable", lease.Err())
			}
		})
	}
}

// With replica acks, renewals and Extend go to the lock's master on a
// connection of its own, not through the cluster client: they follow a
// slot's redirections themselves, as the acquisition does. While the slot
// migrates (its keys moved, the slot not yet handed over) the old owner
// answers ASK; after a resharding, MOVED.
func TestReplicaAck_RenewalsAndExtendFollowASlotThatMoves(t *testing.T) {
	const ttl = time.Second // renewed every 333 ms
	c := redistest.StartReplicatedCluster(t)
	ctx := ctxFor(t, time.Minute)
	rdb := c.Client()
	renewals, observed := renewalsSeen()
	// A Semaphore: a Mutex's renewals meet TRYAGAIN while its slot
	// migrates, with or without acks (its extend names keys that are not
	// there).
	sem := newClient(t, rdb, dlock.WithTTL(ttl), dlock.WithReplicaAck(1, 200*time.Millisecond), observed).Semaphore(lockName(t), 2)
	lease, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slot := int(rdb.ClusterKeySlot(ctx, lockKey(sem.Name())).Val())
	from, err := c.SlotOwner(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	to := (from + 1) % len(c.Nodes)
	// Every key moved at once, the slot still migrating (as a resharding
	// leaves it between its last batch and handing the slot over): the old
	// owner answers ASK.
	src, dst := c.Nodes[from].Client(), c.Nodes[to].Client()
	srcID, dstID := src.ClusterMyID(ctx).Val(), dst.ClusterMyID(ctx).Val()
	if err := dst.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := src.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(c.Nodes[to].Addr())
	migrate := []any{"migrate", host, port, "", 0, 5000, "keys"}
	for _, k := range src.ClusterGetKeysInSlot(ctx, slot, 100).Val() {
		migrate = append(migrate, k)
	}
	if err := src.Do(ctx, migrate...).Err(); err != nil {
		t.Fatal(err)
	}
	for range len(renewals) { // answered before
		<-renewals
	}
	for confirmed := 0; confirmed < 4; { // more than a TTL's worth
		select {
		case ev := <-renewals:
			if ev.Result != observe.RenewalOK {
				t.Fatalf("a renewal while the slot migrates: %s, %v", ev.Result, ev.Err)
			}
			confirmed++
		case <-ctx.Done():
			t.Fatal("no renewal answered")
		}
	}
	for _, n := range c.Nodes {
		if err := n.Client().Do(ctx, "cluster", "setslot", slot, "node", dstID).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// After a resharding the old owner answers MOVED. A Client of its own
	// and a TTL that renews nothing meanwhile: its cluster client's layout
	// stays the one from before the move, so Extend meets MOVED for sure.
	mu := newClient(t, c.Client(), dlock.WithTTL(30*time.Second), dlock.WithReplicaAck(1, 200*time.Millisecond)).Mutex(lockName(t))
	held, err := mu.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slot = int(rdb.ClusterKeySlot(ctx, lockKey(mu.Name())).Val())
	if from, err = c.SlotOwner(ctx, slot); err != nil {
		t.Fatal(err)
	}
	if err := c.MigrateSlot(ctx, slot, (from+1)%len(c.Nodes), nil); err != nil {
		t.Fatal(err)
	}
	if err := held.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend after the slot moved: %v", err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// Leases with replica acks renew in batches of their own: a lease of the
// same Client without them, due at the same moment, is not held up by a
// WAIT for a replica that does not answer (here WAIT's 2 s would outlast
// its 1 s TTL), and the lease with them is not renewed without one.
func TestReplicaAck_OtherLeasesDoNotWaitForTheReplicas(t *testing.T) {
	const ttl = time.Second
	f := redistest.StartFailover(t)
	ctx := ctxFor(t, time.Minute)
	renewals, observed := renewalsSeen()
	c := newClient(t, f.Client(), dlock.WithTTL(ttl), observed)
	plain, err := c.Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	acked, err := c.Mutex(lockName(t), dlock.WithReplicaAck(1, 2*time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.Replica.Pause()
	defer f.Replica.Resume()
	unconfirmed := false
	for confirmed := 0; confirmed < 4 || !unconfirmed; { // more than a TTL's worth of the plain lease's renewals
		select {
		case ev := <-renewals:
			switch {
			case ev.Name == plain.Name() && ev.Result == observe.RenewalOK:
				confirmed++
			case ev.Name == acked.Name() && ev.Result == observe.RenewalOK:
				t.Fatal("a renewal of the lease with replica acks confirmed with its replica stopped")
			case ev.Name == acked.Name():
				unconfirmed = errors.Is(ev.Err, dlock.ErrReplicaAck)
			}
		case <-plain.Done():
			t.Fatalf("the lease without replica acks was lost: %v", plain.Err())
		case <-ctx.Done():
			t.Fatal("no renewal answered")
		}
	}
	_ = plain.Unlock(ctx)
	_ = acked.Unlock(ctx)
}

// A renewal whose WAIT the server refuses (the user lost +wait) fails, and
// says why: the Observer's renewal event matches ErrPermission, as
// LossUnreachable's doc promises, not a slow replica's ErrReplicaAck.
func TestReplicaAck_ARenewalWhoseWaitIsRefusedSaysSo(t *testing.T) {
	f := redistest.StartFailover(t)
	ctx := ctxFor(t, time.Minute)
	admin := f.Master.Client()
	user := aclUser(t, ctx, admin, "waiter", append(append([]string(nil), dlockACL...), "+wait")...)
	renewals, observed := renewalsSeen()
	lease, err := newClient(t, user, dlock.WithTTL(time.Second), dlock.WithReplicaAck(1, 200*time.Millisecond), observed).
		Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "waiter", "-wait").Err(); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case ev := <-renewals:
			if ev.Result == observe.RenewalOK {
				continue // sent before the right was taken
			}
			if !errors.Is(ev.Err, dlock.ErrPermission) || errors.Is(ev.Err, dlock.ErrReplicaAck) {
				t.Fatalf("a renewal whose WAIT was refused: %s, %v; want ErrPermission", ev.Result, ev.Err)
			}
			_ = lease.Unlock(ctx)
			return
		case <-ctx.Done():
			t.Fatal("no renewal answered")
		}
	}
}
