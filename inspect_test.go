package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// inspecting is what each test here starts with: a server of its own, a
// Client on it, a context and a lock name.
func inspecting(t *testing.T) (*redis.Client, *dlock.Client, context.Context, string) {
	srv := startServer(t)
	rdb := srv.Client()
	return rdb, newClient(t, rdb), ctxFor(t, 30*time.Second), lockName(t)
}

// Describe's Kind is one constant per type it tells apart.
func TestClient_DescribeKindIsOneConstantPerType(t *testing.T) {
	_, c, ctx, name := inspecting(t)

	cases := []struct {
		name string
		take func(name string) error
		want dlock.Kind
	}{
		{"free", func(string) error { return nil }, ""},
		{"mutex", func(name string) error { _, err := c.Mutex(name).Lock(ctx); return err }, dlock.KindMutex},
		{"rw", func(name string) error { _, err := c.RWMutex(name).RLock(ctx); return err }, dlock.KindRead},
		{"rw write", func(name string) error { _, err := c.RWMutex(name).Lock(ctx); return err }, dlock.KindWrite},
		{"reentrant", func(name string) error { _, err := c.ReentrantMutex(name).Lock(ctx); return err }, dlock.KindReentrant},
		{"semaphore", func(name string) error { _, err := c.Semaphore(name, 2).Acquire(ctx); return err }, dlock.KindSemaphore},
		{"election", func(name string) error { _, err := c.Election(name).Campaign(ctx, "v"); return err }, dlock.KindElection},
	}
	for _, tc := range cases {
		name := name + tc.name
		if err := tc.take(name); err != nil {
			t.Fatal(err)
		}
		if info, err := c.Describe(ctx, name); err != nil || info.Kind != tc.want {
			t.Errorf("%s: Kind %q, %v; want %q", tc.name, info.Kind, err, tc.want)
		}
	}
}

// Describe and ForceUnlock look under the prefix they are given, as a
// handle does with WithPrefix, and under the Client's otherwise.
func TestClient_DescribeAndForceUnlockHonourWithPrefix(t *testing.T) {
	_, c, ctx, name := inspecting(t)

	lease, err := c.Mutex(name, dlock.WithPrefix("other:")).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Describe(ctx, name, dlock.WithPrefix("other:"))
	if err != nil || info.Kind != dlock.KindMutex || info.LastToken != lease.Token() {
		t.Fatalf("under the handle's prefix: %+v, %v; want the Mutex held", info, err)
	}
	if info, err := c.Describe(ctx, name); err != nil || info.Kind != "" {
		t.Fatalf("under the Client's prefix: %+v, %v; want free", info, err)
	}
	if _, err := c.Describe(ctx, name, dlock.WithPrefix("a{b}:")); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("a prefix with a hash tag: %v; want ErrInvalid", err)
	}
	if held, err := c.ForceUnlock(ctx, name); err != nil || held {
		t.Fatalf("ForceUnlock under the Client's prefix: %v, %v; want nothing held", held, err)
	}
	if held, err := c.ForceUnlock(ctx, name, dlock.WithPrefix("other:")); err != nil || !held {
		t.Fatalf("ForceUnlock under the handle's prefix: %v, %v; want the Mutex removed", held, err)
	}
	if info, err := c.Describe(ctx, name, dlock.WithPrefix("other:")); err != nil || info.Kind != "" {
		t.Fatalf("after ForceUnlock: %+v, %v; want free", info, err)
	}
}

func TestMutex_InspectReportsTheHold(t *testing.T) {
	_, c, ctx, name := inspecting(t)
	info := dlock.HolderInfo{Hostname: "web-1", PID: 42}
	m := c.Mutex(name, dlock.WithPrefix("inspect:"), dlock.WithHolderInfo(info))

	if s, err := m.Inspect(ctx); err != nil || s != (dlock.MutexState{}) {
		t.Fatalf("free: %+v, %v; want the zero MutexState", s, err)
	}
	lease, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Inspect(ctx)
	if err != nil || !s.Held || s.TTL <= 0 || s.TTL > dlock.DefaultTTL || s.LastToken != lease.Token() ||
		s.Info == nil || *s.Info != info || s.Waiting != 0 {
		t.Fatalf("held: %+v, %v; want held with token %d and info %+v", s, err, lease.Token(), info)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := m.Inspect(ctx); err != nil || s.Held || s.TTL != 0 || s.LastToken != lease.Token() {
		t.Fatalf("released: %+v, %v; want not held, the last token kept", s, err)
	}
}

// A Mutex (or FairMutex) handle on a name another type holds reports
// ErrWrongType, as its Lock would, rather than a Mutex that is free.
func TestMutex_InspectRefusesAnotherType(t *testing.T) {
	_, c, ctx, name := inspecting(t)
	if _, err := c.RWMutex(name).RLock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mutex(name).Inspect(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Mutex.Inspect of a read-locked RWMutex: %v; want ErrWrongType", err)
	}
	if _, err := c.FairMutex(name).Inspect(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("FairMutex.Inspect of a read-locked RWMutex: %v; want ErrWrongType", err)
	}
}

func TestFairMutex_InspectCountsTheQueue(t *testing.T) {
	rdb, c, ctx, name := inspecting(t)
	f := c.FairMutex(name)

	held, err := f.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	queuer := newClient(t, rdb)
	attempts := countAttemptsOf(queuer, scripts.FairAcquire)
	waiting := lockInBackground(ctx, queuer.FairMutex(name).Lock)
	waitDone(t, attempts.registeredReach(1), 10*time.Second, "the waiter queueing")
	s, err := f.Inspect(ctx)
	if err != nil || !s.Held || s.Waiting != 1 || s.LastToken != held.Token() || s.Info != nil {
		t.Fatalf("held, one queued: %+v, %v; want held, 1 waiting", s, err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	expectAcquired(t, waiting, 10*time.Second, "the queued Lock was not handed the lock")
}
