package dlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/observe"
)

// An option given where it does not apply is refused like a bad value, by
// the first call and before anything is sent; where it applies it is
// taken. A Client takes what any type it makes takes, as their default.
func TestOptions_ThatDoNotApplyAreRefused(t *testing.T) {
	rdb := backends[0].newRedis(t)
	counter := &commandCounter{}
	rdb.AddHook(counter)
	ctx := ctxFor(t, time.Minute)
	// A Redlock over three connections to one server: enough to see what
	// it takes, which is refused before anything is sent.
	nodes := []redis.UniversalClient{rdb, rdb, rdb}
	// first is the error of a first call, releasing what it took.
	first := func(lease *dlock.Lease, err error) error {
		if lease != nil {
			_ = lease.Unlock(ctx)
		}
		return err
	}
	try := map[string]func(opt dlock.Option) error{
		"Client": func(opt dlock.Option) error {
			c, err := dlock.New(rdb, opt)
			if err != nil {
				return err
			}
			defer c.Close()
			return first(c.Mutex(lockName(t)).TryLock(ctx))
		},
		"Mutex": func(opt dlock.Option) error {
			return first(newClient(t, rdb).Mutex(lockName(t), opt).TryLock(ctx))
		},
		"FairMutex": func(opt dlock.Option) error {
			return first(newClient(t, rdb).FairMutex(lockName(t), opt).TryLock(ctx))
		},
		"RWMutex": func(opt dlock.Option) error {
			return first(newClient(t, rdb).RWMutex(lockName(t), opt).TryLock(ctx))
		},
		"ReentrantMutex": func(opt dlock.Option) error {
			return first(newClient(t, rdb).ReentrantMutex(lockName(t), opt).TryLock(ctx))
		},
		"Semaphore": func(opt dlock.Option) error {
			return first(newClient(t, rdb).Semaphore(lockName(t), 2, opt).TryAcquire(ctx))
		},
		"MultiLock": func(opt dlock.Option) error {
			return first(newClient(t, rdb).MultiLock([]string{lockName(t)}, opt).TryLock(ctx))
		},
		"Election": func(opt dlock.Option) error {
			return first(newClient(t, rdb, dlock.WithWait(0)).Election(lockName(t), opt).Campaign(ctx, "v"))
		},
		"NewRedlock": func(opt dlock.Option) error {
			r, err := dlock.NewRedlock(nodes, opt, dlock.WithRestartGuard(0))
			if err != nil {
				return err
			}
			return first(r.Mutex(lockName(t), dlock.WithNodeTimeout(time.Second)).TryLock(ctx))
		},
		"RedlockMutex": func(opt dlock.Option) error {
			r := mustRedlock(t, nodes, dlock.WithRestartGuard(0))
			return first(r.Mutex(lockName(t), opt).TryLock(ctx))
		},
		"Describe": func(opt dlock.Option) error {
			_, err := newClient(t, rdb).Describe(ctx, lockName(t), opt)
			return err
		},
		"ForceUnlock": func(opt dlock.Option) error {
			_, err := newClient(t, rdb).ForceUnlock(ctx, lockName(t), opt)
			return err
		},
	}
	everyType := []string{"Client", "Mutex", "FairMutex", "RWMutex", "ReentrantMutex", "Semaphore", "MultiLock", "Election", "NewRedlock", "RedlockMutex"}
	// Describe and ForceUnlock look a lock up by name: the prefix is all
	// they use of options.
	everyMaker := append(everyType[:len(everyType):len(everyType)], "Describe", "ForceUnlock")
	for _, tc := range []struct {
		option    string
		opt       dlock.Option
		appliesTo []string
	}{
		{"WithOwner", dlock.WithOwner("o"), []string{"Client", "RWMutex", "ReentrantMutex"}},
		{"WithWaiterRefresh", dlock.WithWaiterRefresh(time.Second),
			[]string{"Client", "Mutex", "FairMutex", "RWMutex", "ReentrantMutex", "Semaphore", "MultiLock", "Election"}},
		{"WithHolderInfo", dlock.WithHolderInfo(admin.HolderInfo{Program: "p"}),
			[]string{"Client", "Mutex", "FairMutex", "RWMutex", "ReentrantMutex", "Semaphore"}},
		{"WithReplicaAck", dlock.WithReplicaAck(0, time.Second),
			[]string{"Client", "Mutex", "FairMutex", "RWMutex", "ReentrantMutex", "Semaphore", "MultiLock", "Election"}},
		{"WithNodeTimeout", dlock.WithNodeTimeout(time.Second), []string{"NewRedlock", "RedlockMutex"}},
		{"WithRestartGuard", dlock.WithRestartGuard(0), []string{"NewRedlock", "RedlockMutex"}},
		{"WithDriftFactor", dlock.WithDriftFactor(0.02), everyType},
		{"WithWait", dlock.WithWait(0), everyType},
		{"WithTTL", dlock.WithTTL(10 * time.Second), everyType},
		{"WithLeaseTime", dlock.WithLeaseTime(10 * time.Second), everyType},
		{"WithLogger", dlock.WithLogger(nil), everyType},
		{"WithObserver", dlock.WithObserver(&observe.Observer{}), everyType},
		{"WithPrefix", dlock.WithPrefix("p:"), everyMaker},
	} {
		for _, lockType := range everyMaker {
			applies := false
			for _, what := range tc.appliesTo {
				applies = applies || what == lockType
			}
			sent := counter.commands.Load()
			err := try[lockType](tc.opt)
			switch {
			case applies && errors.Is(err, dlock.ErrInvalid):
				t.Errorf("%s to a %s: %v; want it taken", tc.option, lockType, err)
			case !applies && (!errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), tc.option)):
				t.Errorf("%s to a %s: %v; want ErrInvalid naming it", tc.option, lockType, err)
			case !applies && counter.commands.Load() != sent:
				t.Errorf("%s to a %s: refused after %d commands; want none sent", tc.option, lockType, counter.commands.Load()-sent)
			}
		}
	}
}

// An owner id is shown to operators (dlock status, ls, watch): one that
// does not print as it is (control characters, invalid UTF-8, bidi
// overrides) is refused with ErrInvalid, before anything is sent.
func TestWithOwner_AnIDThatDoesNotPrintIsInvalidBeforeAnyCommand(t *testing.T) {
	counter := &commandCounter{}
	rdb := backends[0].newRedis(t)
	rdb.AddHook(counter)
	ctx := ctxFor(t, 10*time.Second)
	for _, id := range []string{"o\x1b]0;owned\a", "line\nbreak", "bad\xffutf8", "rtl\u202eevil", "del\x7f"} {
		if c, err := dlock.New(rdb, dlock.WithOwner(id)); c != nil || !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("New with owner %q: %v, %v; want ErrInvalid", id, c, err)
		}
		c := newClient(t, rdb)
		if _, err := c.RWMutex("x", dlock.WithOwner(id)).Lock(ctx); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("RWMutex Lock with owner %q: %v; want ErrInvalid", id, err)
		}
		if _, err := c.ReentrantMutex("x", dlock.WithOwner(id)).TryLock(ctx); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("ReentrantMutex TryLock with owner %q: %v; want ErrInvalid", id, err)
		}
	}
	if n := counter.commands.Load(); n != 0 {
		t.Fatalf("%d commands sent for invalid owner ids, want 0", n)
	}
	if _, err := newClient(t, rdb).RWMutex("x", dlock.WithOwner("host-a/pid 7/ü")).Lock(ctx); err != nil {
		t.Fatalf("a printable owner id with a space and a non-ASCII letter: %v", err)
	}
}
