package dlock_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/family"
	"github.com/dlockio/dlock/internal/redistest"
)

// dlockACL is what the README tells operators to grant dlock on a single
// server; the fault suite runs with it too.
var dlockACL = redistest.DlockACL

// aclUser creates a user with the rules and returns a client logged in as it.
func aclUser(t *testing.T, ctx context.Context, admin *redis.Client, name string, rules ...string) *redis.Client {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">secret-" + name}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, Username: name, Password: "secret-" + name})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestACL_AUserLimitedToTheDocumentedCommandsRunsEveryType(t *testing.T) {
	t.Parallel()
	t.Run("standalone", func(t *testing.T) {
		srv := startServer(t)
		ctx := ctxFor(t, time.Minute)
		admin := srv.Client()
		runEveryTypeAs(t, ctx, aclUser(t, ctx, admin, "locks", dlockACL...), aclUser(t, ctx, admin, "locks2", dlockACL...),
			func() error { return forgetScripts(ctx, admin) })
	})
	// A user granted dlock's rights from before it called Redis Functions
	// (no +fcall, no +function|load) runs every type by EVALSHA.
	t.Run("without Functions", func(t *testing.T) {
		srv := startServer(t)
		ctx := ctxFor(t, time.Minute)
		admin := srv.Client()
		runEveryTypeAs(t, ctx, aclUser(t, ctx, admin, "locks", redistest.EvalshaACL...), aclUser(t, ctx, admin, "locks2", redistest.EvalshaACL...),
			func() error { return forgetScripts(ctx, admin) })
		stats := admin.Info(ctx, "commandstats").Val()
		// An FCALL refused by the ACL counts as rejected, not as a call.
		if !strings.Contains(stats, "cmdstat_evalsha:calls=") || regexp.MustCompile(`cmdstat_fcall:calls=[1-9]`).MatchString(stats) {
			t.Errorf("the user without Functions ran scripts other than by EVALSHA:\n%s", stats)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		ctx := ctxFor(t, time.Minute)
		var admins []*redis.Client
		for _, n := range c.Nodes {
			admin := n.Client()
			aclUser(t, ctx, admin, "locks", redistest.ClusterACL...)
			admins = append(admins, admin)
		}
		user := func() redis.UniversalClient {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Username: "locks", Password: "secret-locks"})
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		}
		runEveryTypeAs(t, ctx, user(), user(), func() error {
			for _, admin := range admins {
				if err := forgetScripts(ctx, admin); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// runEveryTypeAs runs a woken waiter, every lock type with Extend and
// Unlock, and ForceUnlock, on clients logged in as limited users; then all
// of it again after flush makes the server forget the scripts.
func runEveryTypeAs(t *testing.T, ctx context.Context, rdb, otherRedis redis.UniversalClient, flush func() error) {
	c := newClient(t, rdb)
	other := newClient(t, otherRedis)
	attempts := countAttempts(other)

	for round := range 2 {
		if round == 1 { // the server forgot the scripts: they are loaded again
			if err := flush(); err != nil {
				t.Fatal(err)
			}
		}
		// A waiter woken by a release: subscribe, register, publish.
		held, err := c.Mutex("m").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Its first try goes before subscribing, the second registers.
		registered := attempts.refusedReach(attempts.refused.Load() + 2)
		waiting := lockInBackground(ctx, other.Mutex("m").Lock)
		waitDone(t, registered, time.Minute, "the waiter registering")
		if info, err := c.Describe(ctx, "m"); err != nil || info.WritersWaiting != 1 {
			t.Fatalf("a registered waiter: %+v, %v", info, err)
		}
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		expectAcquired(t, waiting, time.Minute, "the waiter was not woken")

		for _, k := range serverKinds() {
			what := k.Label()
			lease, err := k.Take(ctx, family.Target{Client: c, Value: "v"}, namesOf(k, string(k.Kind)), false)
			if err != nil {
				t.Fatalf("%s as the limited user: %v", what, err)
			}
			if err := lease.Extend(ctx, time.Minute); err != nil {
				t.Fatalf("%s: Extend: %v", what, err)
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Fatalf("%s: Unlock: %v", what, err)
			}
		}
		if _, err := c.ForceUnlock(ctx, "m"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestACL_AMissingPermissionIsAnErrorNotLockTaken(t *testing.T) {
	srv := startServer(t)
	ctx := ctxFor(t, time.Minute)
	admin := srv.Client()
	var noTime []string // TIME: read by the acquire script once it has taken the lock, to mint the token
	for _, r := range dlockACL {
		if r != "+time" {
			noTime = append(noTime, r)
		}
	}
	for what, c := range map[string]*dlock.Client{
		"a script command denied": newClient(t, aclUser(t, ctx, admin, "notime", noTime...)),
		"keys outside its prefix": newClient(t, aclUser(t, ctx, admin, "other", dlockACL...), dlock.WithPrefix("other:")),
		"WAIT denied to WithReplicaAck": newClient(t, aclUser(t, ctx, admin, "nowait", dlockACL...),
			dlock.WithReplicaAck(1, 50*time.Millisecond)),
	} {
		_, err := c.Mutex("m").TryLock(ctx)
		if !errors.Is(err, dlock.ErrPermission) || errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("%s: %v; want ErrPermission, not ErrNotAcquired", what, err)
		}
	}
	if n := admin.Exists(ctx, "dlock:{m}", "other:{m}").Val(); n != 0 {
		// The WAIT case was granted before WAIT was refused: it must have
		// been given back.
		t.Fatal("a denied acquisition left a hold")
	}
}

// On a server that does not know dlock's scripts (new, restarted or
// flushed), a user who may not load them (neither as a library nor for
// EVALSHA) is told so: the attempt fails with the load's refusal,
// matching ErrPermission and naming the command, not with NOSCRIPT, and
// takes nothing.
func TestACL_AUserWhoMayNotLoadScriptsIsToldWhyOnAColdServer(t *testing.T) {
	srv := startServer(t)
	ctx := ctxFor(t, time.Minute)
	admin := srv.Client()
	var noLoad []string
	for _, r := range dlockACL {
		if r != "+script|load" && r != "+function|load" {
			noLoad = append(noLoad, r)
		}
	}
	c := newClient(t, aclUser(t, ctx, admin, "noload", noLoad...))
	_, err := c.Mutex("m").TryLock(ctx)
	if !errors.Is(err, dlock.ErrPermission) || !strings.Contains(err.Error(), "script|load") {
		t.Fatalf("TryLock on a cold server without +script|load: %v; want ErrPermission naming script|load", err)
	}
	if n := admin.Exists(ctx, "dlock:{m}").Val(); n != 0 {
		t.Fatal("a refused load left a hold")
	}
}

// A user missing one right that a script needs part-way is refused with
// ErrPermission, and the refusal leaves nothing that never expires: Redis
// does not undo a script's writes when a later command in it is refused,
// so a script that wrote a hold before being refused its expiry (or the
// sorted set that sets it) would leave a lock held for good.
func TestACL_AScriptRefusedPartWayLeavesNoHoldWithoutExpiry(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctx := ctxFor(t, 2*time.Minute)
	admin := srv.Client()
	for _, rule := range dlockACL {
		switch rule {
		case "+evalsha", "+eval", "+script|load", "+subscribe", "+unsubscribe", "+ping", "+hello":
			continue // not run by a script
		}
		if rule[0] != '+' {
			continue
		}
		var rules []string
		for _, r := range dlockACL {
			if r != rule {
				rules = append(rules, r)
			}
		}
		user := "no" + rule[1:]
		c := newClient(t, aclUser(t, ctx, admin, user, rules...))
		for _, lt := range lockTypes {
			name := "acl-" + user + "-" + lt.name
			if lt.hold != nil { // a reader behind a writer: the writer is taken by an admin
				if _, err := lt.hold(newClient(t, admin), name)(ctx); err != nil {
					t.Fatal(err)
				}
			}
			try, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			lease, err := lt.take(c, name)(try)
			cancel()
			if err == nil {
				_ = lease.Unlock(ctx)
			}
			for _, key := range keysOn(t, ctx, admin, "*{"+name+"*") {
				if strings.HasSuffix(key, "}:permits") || strings.HasSuffix(key, "}:leader") {
					continue // kept for good by design
				}
				if ttl := admin.PTTL(ctx, key).Val(); ttl == -1 {
					t.Errorf("without %s, %s left %s with no expiry (%v)", rule, lt.name, key, err)
				}
			}
		}
	}
}

// A command refused inside a release script (rights taken away while the
// lock was held) is ErrPermission on every server: Redis 7.0 says "The user
// executing the script can't run this command", Redis 8 and Valkey "ACL
// failure in script: User … has no permissions to run the '…' command".
func TestACL_ACommandRefusedInAReleaseIsErrPermission(t *testing.T) {
	srv := startServer(t)
	ctx := ctxFor(t, time.Minute)
	admin := srv.Client()
	c := newClient(t, aclUser(t, ctx, admin, "revoked", dlockACL...))
	lease, err := c.Mutex("m").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "revoked", "-mget").Err(); err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrPermission) {
		t.Fatalf("Unlock without +mget: %v; want ErrPermission", err)
	}
}

// A user who may call functions but not load them, on a server without
// dlock's library, is sent by EVALSHA instead: the refused load is no
// refused lock.
func TestACL_AUserWhoMayNotLoadTheLibraryLocksByEvalsha(t *testing.T) {
	srv := startServer(t)
	ctx := ctxFor(t, time.Minute)
	admin := srv.Client()
	if err := forgetScripts(ctx, admin); err != nil {
		t.Fatal(err)
	}
	rules := slices.DeleteFunc(slices.Clone(dlockACL), func(r string) bool { return r == "+function|load" })
	c := newClient(t, aclUser(t, ctx, admin, "nolibrary", rules...))
	for range 2 { // cold, then with the scripts loaded
		lease, err := c.Mutex(lockName(t)).Lock(ctx)
		if err != nil {
			t.Fatalf("Lock by a user without +function|load: %v", err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
