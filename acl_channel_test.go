package dlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/scripts"
)

// appACL is the README's rights with the keys moved to a WithPrefix("app:")
// and the channel pattern left at &dlock:*: a mistake an operator makes.
func appACL() []string {
	rules := append([]string(nil), dlockACL...)
	for i, r := range rules {
		if r == "~dlock:*" {
			rules[i] = "~app:*"
		}
	}
	return rules
}

// A waiting Lock whose SUBSCRIBE Redis refuses (ACL: the channel, or the
// command) fails with ErrPermission at once, as the README promises,
// rather than waiting out the holder's TTL on a lock that may be free by
// then (before, it did: without a subscription no release reached it).
func TestACL_ARefusedChannelFailsAWaitingLockWithErrPermission(t *testing.T) {
	srv := startServer(t)
	ctx := ctxFor(t, time.Minute)
	admin := srv.Client()
	var noSubscribe []string
	for _, r := range dlockACL {
		if r != "+subscribe" {
			noSubscribe = append(noSubscribe, r)
		}
	}
	for user, prefix := range map[string]string{"app": "app:", "nosub": dlock.DefaultPrefix} {
		rules := appACL()
		if user == "nosub" {
			rules = noSubscribe
		}
		holder := newClient(t, admin, dlock.WithPrefix(prefix))
		c := newClient(t, aclUser(t, ctx, admin, user, rules...), dlock.WithPrefix(prefix))
		for what, lock := range map[string]func(c *dlock.Client) func(context.Context) (*dlock.Lease, error){
			"Mutex":     func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) { return c.Mutex("m").Lock },
			"FairMutex": func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) { return c.FairMutex("f").Lock },
			"RWMutex":   func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) { return c.RWMutex("rw").Lock },
		} {
			held, err := lock(holder)(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// The holder renews: a waiter that hears nothing would wait it out.
			wait, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err = lock(c)(wait)
			cancel()
			if !errors.Is(err, dlock.ErrPermission) || errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("%s, %s: a Lock whose subscription is refused: %v; want ErrPermission, not ErrNotAcquired", user, what, err)
			}
			if err := held.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A FairMutex Unlock that hands the lock over and is refused its PUBLISH
// (ACL) fails with ErrPermission, and is no loss: the lease was released.
func TestACL_ARefusedPublishAfterAHandOverIsErrPermissionNotALoss(t *testing.T) {
	srv := startServer(t)
	ctx := ctxFor(t, time.Minute)
	admin := srv.Client()
	var log syncBuffer
	c := newClient(t, aclUser(t, ctx, admin, "app", appACL()...), dlock.WithPrefix("app:"),
		dlock.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	other := newClient(t, admin, dlock.WithPrefix("app:"))
	name := lockName(t)
	held, err := c.FairMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	queued := other.FairMutex(name)
	waiting := lockInBackground(ctx, queued.Lock)
	eventually(t, ctx, "the waiter queued", func() bool {
		info, err := other.Describe(ctx, name)
		return err == nil && info.WritersWaiting == 1
	})
	err = held.Unlock(ctx)
	if !errors.Is(err, dlock.ErrPermission) {
		t.Errorf("Unlock refused its PUBLISH: %v; want ErrPermission", err)
	}
	if lost := held.Err(); lost != nil || strings.Contains(log.String(), "lease lost") {
		t.Errorf("Unlock refused its PUBLISH: the lease reports %v, the log %q; want it released, no loss", lost, log.String())
	}
	expectAcquired(t, waiting, 30*time.Second, "the waiter handed the lock did not get it")
}

// A waiting Lock whose first attempt was refused so slowly that go-redis
// may have sent it twice, and whose SUBSCRIBE is then refused, leaves its
// tombstone as it fails: the other copy, arriving once the lock is free,
// takes nothing (docs/SAFETY.md, "No orphaned holds").
func TestACL_ARefusedChannelAfterASlowRefusalLeavesTheTombstone(t *testing.T) {
	srv := startServer(t)
	ctx := ctxFor(t, time.Minute)
	admin := srv.Client()
	name := lockName(t)
	holder, err := newClient(t, admin, dlock.WithPrefix("app:")).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	aclUser(t, ctx, admin, "app", appACL()...)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "app", Password: "secret-app", ReadTimeout: readTimeout})
	t.Cleanup(func() { _ = rdb.Close() })
	copies := &copier{script: scripts.MutexAcquire, slowReply: readTimeout * 3 / 2, slowStatus: 0}
	rdb.AddHook(copies)
	if _, err := newClient(t, rdb, dlock.WithPrefix("app:")).Mutex(name).Lock(ctx); !errors.Is(err, dlock.ErrPermission) {
		t.Fatalf("a Lock whose subscription is refused: %v; want ErrPermission", err)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	copies.resendFirst(t, ctx, admin, 1)
	expectNothingLeft(t, ctx, admin, name, "a late copy of the slow refusal once the lock is free")
}
