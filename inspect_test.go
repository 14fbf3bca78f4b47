package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/observe"
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
		want observe.Kind
	}{
		{"free", func(string) error { return nil }, ""},
		{"mutex", func(name string) error { _, err := c.Mutex(name).Lock(ctx); return err }, observe.KindMutex},
		{"rw", func(name string) error { _, err := c.RWMutex(name).RLock(ctx); return err }, observe.KindRead},
		{"rw write", func(name string) error { _, err := c.RWMutex(name).Lock(ctx); return err }, observe.KindWrite},
		{"reentrant", func(name string) error { _, err := c.ReentrantMutex(name).Lock(ctx); return err }, observe.KindReentrant},
		{"semaphore", func(name string) error { _, err := c.Semaphore(name, 2).Acquire(ctx); return err }, observe.KindSemaphore},
		{"election", func(name string) error { _, err := c.Election(name).Campaign(ctx, "v"); return err }, observe.KindElection},
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
	if err != nil || info.Kind != observe.KindMutex || info.LastToken != lease.Token() {
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

// Describe reports a Mutex's hold with its holder info, and once it is
// released no holder but the last token.
func TestClient_DescribeReportsAMutexsHoldThenItsLastToken(t *testing.T) {
	_, c, ctx, name := inspecting(t)
	info := admin.HolderInfo{Hostname: "web-1", PID: 42}
	prefix := dlock.WithPrefix("inspect:")
	lease, err := c.Mutex(name, prefix, dlock.WithHolderInfo(info)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Describe(ctx, name, prefix)
	if err != nil || len(s.Holders) != 1 || s.TTL <= 0 || s.TTL > dlock.DefaultTTL || s.LastToken != lease.Token() ||
		s.Holders[0].Info == nil || *s.Holders[0].Info != info || s.WritersWaiting != 0 {
		t.Fatalf("held: %+v, %v; want held with token %d and info %+v", s, err, lease.Token(), info)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := c.Describe(ctx, name, prefix); err != nil || len(s.Holders) != 0 || s.TTL != 0 || s.LastToken != lease.Token() {
		t.Fatalf("released: %+v, %v; want not held, the last token kept", s, err)
	}
}
