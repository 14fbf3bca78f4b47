package dlocktest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/dlocktest"
	"github.com/dlockio/dlock/internal/family"
	"github.com/dlockio/dlock/observe"
)

// holdKinds take a hold of each lock type that Expire and Steal act on
// (every kind of one name on a Client's server), and say the reason a real
// takeover gives its lease: another owner found under the key where the
// hold carries one, a Mutex's lock (LossTaken), else LossExpired.
var holdKinds = func() []holdKind {
	var kinds []holdKind
	for _, k := range family.All {
		if k.Redlock || k.Group {
			continue
		}
		taken := dlock.LossExpired
		if k.Takeover == observe.KindMutex {
			taken = dlock.LossTaken
		}
		kinds = append(kinds, holdKind{strings.ReplaceAll(string(k.Kind), ".", "-"), func(ctx context.Context, c *dlock.Client, n string) (*dlock.Lease, error) {
			return k.Take(ctx, family.Target{Client: c, Permits: 1, Value: "me"}, []string{n}, false)
		}, taken})
	}
	return kinds
}()

type holdKind struct {
	name  string
	take  func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error)
	taken dlock.LossReason
}

// lostWith waits for lease's loss and fails the test unless its reason is want.
func lostWith(t *testing.T, what string, lease *dlock.Lease, want dlock.LossReason) {
	t.Helper()
	lostBy(t, lease, lease.Deadline())
	var got dlock.LossReason
	if !errors.As(lease.Err(), &got) || got != want {
		t.Errorf("%s: lost with %v; want the reason %q, as a real one gives", what, lease.Err(), want)
	}
}

// Expire gives every lock type's lease the reason an expiry gives,
// LossExpired; Steal the reason a takeover gives.
func TestExpireAndSteal_GiveTheReasonsRealEventsGive(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *dlocktest.Redis) {
		ctx := context.Background()
		c := r.Client(dlock.WithTTL(ttl))
		for _, k := range holdKinds {
			lease, err := k.take(ctx, c, "expire-"+k.name)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Expire(ctx, "expire-"+k.name); err != nil {
				t.Fatal(err)
			}
			lostWith(t, k.name+": Expire", lease, dlock.LossExpired)

			lease, err = k.take(ctx, c, "steal-"+k.name)
			if err != nil {
				t.Fatal(err)
			}
			thief, err := r.Steal(ctx, "steal-"+k.name)
			if err != nil {
				t.Fatal(err)
			}
			lostWith(t, k.name+": Steal", lease, k.taken)
			_ = thief.Unlock(ctx)
		}
	})
}

// Disconnect cuts one Client off while the others go on: its leases are
// lost as a partitioned process's are, and another Client takes over.
func TestDisconnect_CutsOneClientOffWhileAnotherTakesOver(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *dlocktest.Redis) {
		ctx := context.Background()
		leader, standby := r.Client(dlock.WithTTL(ttl)), r.Client(dlock.WithTTL(ttl))
		lease, err := leader.Election("primary").Campaign(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		took := make(chan error, 1)
		go func() {
			next, err := standby.Election("primary").Campaign(ctx, "b")
			if err == nil {
				err = next.Unlock(ctx)
			}
			took <- err
		}()
		if err := r.Disconnect(leader); err != nil {
			t.Fatal(err)
		}
		lostWith(t, "the cut-off leader", lease, dlock.LossUnreachable)
		select {
		case err := <-took:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the standby did not take over within 10 s of the leader's cut")
		}
		if _, err := leader.Mutex("m").TryLock(ctx); !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("TryLock of the cut-off Client: %v; want ErrUnavailable", err)
		}
		if err := r.Reconnect(leader); err != nil {
			t.Fatal(err)
		}
		again, err := leader.Mutex("m").TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock after Reconnect: %v", err)
		}
		_ = again.Unlock(ctx)
		if err := r.Disconnect(r.Client()); err != nil {
			t.Fatal(err)
		}
		if err := r.Disconnect(dlocktest.New(t)); err == nil {
			t.Fatal("Disconnect of another Redis's Client returned no error")
		}
	})
}

// The README's example, as it is there: a worker under a stolen lock
// stops, within a third of the short TTL it gives.
func TestReadme_WorkerStopsWhenItsLockIsStolen(t *testing.T) {
	stopped := make(chan struct{})
	worker := func(ctx context.Context) {
		<-ctx.Done()
		close(stopped)
	}

	ctx := t.Context()
	r := dlocktest.Start(t)
	// A short TTL: the holder sees a loss at its next renewal, TTL/3 on.
	lease, err := r.Client(dlock.WithTTL(300 * time.Millisecond)).Mutex("job").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go worker(lease.Context(ctx)) // the code under test
	// Another owner takes the lock, and the worker's context ends.
	if _, err := r.Steal(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	<-lease.Done()

	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not stop within 10 s of its lease's loss")
	}
}
