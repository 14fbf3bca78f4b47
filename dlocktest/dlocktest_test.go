package dlocktest_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/dlocktest"
	"github.com/dlockio/dlock/internal/family"
	"github.com/dlockio/dlock/internal/redistest"
)

// One redis-server for the tests that need a real one: each test's
// dlocktest.Redis has a key prefix of its own on it.
var (
	shared     = redistest.NewShared()
	serverOnce sync.Once
	server     *redistest.Server
)

func realRedis() *redistest.Server {
	serverOnce.Do(func() { server = redistest.Start(shared) })
	return server
}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Close()
	os.Exit(code)
}

// forEachBackend runs f on the embedded Redis and on a real redis-server,
// as a user's CI would with and without DLOCK_TEST_REDIS_URL.
func forEachBackend(t *testing.T, f func(t *testing.T, r *dlocktest.Redis)) {
	t.Run("embedded", func(t *testing.T) {
		t.Setenv(dlocktest.EnvRedisURL, "")
		f(t, dlocktest.Start(t))
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Setenv(dlocktest.EnvRedisURL, "redis://"+realRedis().Addr())
		r := dlocktest.Start(t)
		if r.Embedded() {
			t.Fatal("Start ignored " + dlocktest.EnvRedisURL)
		}
		f(t, r)
	})
}

const ttl = 600 * time.Millisecond

// lock takes name for a new holder that renews every TTL/3.
func lock(t *testing.T, r *dlocktest.Redis, name string) *dlock.Lease {
	t.Helper()
	lease, err := r.Client(dlock.WithTTL(ttl)).Mutex(name).Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return lease
}

// lostBy waits for lease to report its loss, which must come by its
// deadline as it stands when the fault begins (scheduling allowing).
func lostBy(t *testing.T, lease *dlock.Lease, deadline time.Time) {
	t.Helper()
	select {
	case <-lease.Done():
	case <-time.After(time.Until(deadline) + 5*time.Second):
		t.Fatalf("lease not lost %v after its deadline", 5*time.Second)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Err() = %v, want ErrLeaseLost", err)
	}
}

func TestExpire_HolderSeesTheLoss(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *dlocktest.Redis) {
		ctx := context.Background()
		lease := lock(t, r, "job")
		if err := r.Expire(ctx, "job"); err != nil {
			t.Fatal(err)
		}
		lostBy(t, lease, lease.Deadline())
		if err := r.Expire(ctx, "job"); err == nil {
			t.Fatal("Expire of a free lock returned no error")
		}
		next, err := r.Client().Mutex("job").TryLock(ctx)
		if err != nil {
			t.Fatalf("the expired lock cannot be taken: %v", err)
		}
		if next.Token() <= lease.Token() {
			t.Fatalf("next token %d is not above the expired holder's %d", next.Token(), lease.Token())
		}
	})
}

func TestSteal_HolderSeesTheLossAndItsWritesAreRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *dlocktest.Redis) {
		ctx := context.Background()
		var store dlocktest.FencedStore
		lease := lock(t, r, "invoice")
		if err := store.Put("invoice", lease.Token(), "draft"); err != nil {
			t.Fatal(err)
		}
		thief, err := r.Steal(ctx, "invoice")
		if err != nil {
			t.Fatal(err)
		}
		defer thief.Unlock(ctx)
		if thief.Token() <= lease.Token() {
			t.Fatalf("thief's token %d is not above the holder's %d", thief.Token(), lease.Token())
		}
		if err := store.Put("invoice", thief.Token(), "paid"); err != nil {
			t.Fatal(err)
		}
		lostBy(t, lease, lease.Deadline())
		// The old holder acts late anyway: the store refuses it.
		if err := store.Put("invoice", lease.Token(), "draft again"); !errors.Is(err, dlocktest.ErrStaleToken) {
			t.Fatalf("stale write: %v, want ErrStaleToken", err)
		}
		if v, _, _ := store.Get("invoice"); v != "paid" {
			t.Fatalf("store holds %q, want the thief's write", v)
		}
	})
}

func TestSteal_EveryLockType(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *dlocktest.Redis) {
		ctx := context.Background()
		c := r.Client(dlock.WithTTL(ttl))
		for _, k := range family.All {
			if k.Redlock || k.Group {
				continue
			}
			name := strings.ReplaceAll(string(k.Kind), ".", "-")
			lease, err := k.Take(ctx, family.Target{Client: c}, []string{name}, false)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			before, err := c.Describe(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			thief, err := r.Steal(ctx, name)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			want := family.MustOf(before.Kind).Takeover // a reader's RWMutex is taken by its write lock
			if after, err := c.Describe(ctx, name); err != nil || after.Kind != want {
				t.Fatalf("%s: the thief holds a %q (%v); want the holder's type, %q", name, after.Kind, err, want)
			}
			if thief.Token() <= lease.Token() {
				t.Fatalf("%s: thief's token %d is not above the holder's %d", name, thief.Token(), lease.Token())
			}
			lostBy(t, lease, lease.Deadline())
			if err := thief.Unlock(ctx); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	})
}

func TestStallRenewals_LeaseIsAtRiskThenLostThenLocksWorkAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *dlocktest.Redis) {
		ctx := context.Background()
		// A TTL of a second: at risk at half of it, a sixth of it still
		// left, room enough on a loaded machine to see the lease at risk
		// and not yet lost.
		lease, err := r.Client(dlock.WithTTL(time.Second)).Mutex("report").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r.StallRenewals(4 * time.Second)
		select {
		case <-lease.AtRisk():
		case <-time.After(10 * time.Second):
			t.Fatal("not at risk 10 s into a stall of its renewals")
		}
		select {
		case <-lease.Done():
			t.Fatalf("lost by the time it was at risk: %v", lease.Err())
		default:
		}
		lostBy(t, lease, lease.Deadline())
		r.StallRenewals(0)
		again := lock(t, r, "report")
		if err := again.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSlow_RenewalsSlowerThanTheTTLLoseTheLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *dlocktest.Redis) {
		ctx := context.Background()
		c := r.Client(dlock.WithTTL(ttl))
		lease, err := c.Mutex("slow").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r.Slow(2 * ttl)
		lostBy(t, lease, lease.Deadline())

		short, cancel := context.WithTimeout(ctx, ttl/4)
		defer cancel()
		if _, err := c.Mutex("slow2").TryLock(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("TryLock on a slow Redis: %v, want the context's deadline", err)
		}
		r.Slow(0)
	})
}

func TestDown_LeaseIsLostLocksFailThenWorkAfterUp(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *dlocktest.Redis) {
		ctx := context.Background()
		c := r.Client(dlock.WithTTL(ttl))
		lease, err := c.Mutex("down").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r.Down()
		lostBy(t, lease, lease.Deadline())
		_, err = c.Mutex("other").TryLock(ctx)
		if err == nil || errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock while Redis is down: %v, want a connection error", err)
		}
		r.Up()
		again, err := c.Mutex("other").TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock after Up: %v", err)
		}
		_ = again.Unlock(ctx)
	})
}

func TestFencedStore_RefusesOnlyLowerTokens(t *testing.T) {
	var s dlocktest.FencedStore
	for _, w := range []struct {
		token uint64
		ok    bool
	}{{5, true}, {5, true}, {7, true}, {6, false}, {8, true}} {
		err := s.Put("k", w.token, "v")
		if (err == nil) != w.ok || (err != nil && !errors.Is(err, dlocktest.ErrStaleToken)) {
			t.Fatalf("Put with token %d: %v, want ok=%v", w.token, err, w.ok)
		}
	}
	if _, token, ok := s.Get("k"); !ok || token != 8 {
		t.Fatalf("Get = token %d, %v; want 8", token, ok)
	}
}

func TestRealRedis_KeysAreRemovedAfterTheTest(t *testing.T) {
	srv := realRedis()
	r, err := dlocktest.NewRedis("redis://" + srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.Client().Mutex("left").TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	prefix := r.Prefix()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	keys, err := srv.Client().Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Fatalf("keys left under the test's prefix: %v", keys)
	}
}
