package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// Rights taken away at runtime, after the Client's user has locked every
// type once (the acquires have checked its rights): a lock refused part-way
// fails with ErrPermission and leaves nothing applied, so that anyone
// may take the lock at once; a lock granted and released regardless, or
// refused its release, leaves no key without expiry.
func TestACL_RightsRevokedAfterTheFirstLocksLeaveNothingHalfApplied(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctx := ctxFor(t, 2*time.Minute)
	admin := srv.Client()
	other := newClient(t, admin)
	for _, rule := range scriptRights() {
		user := "revoked-" + rule[1:]
		c := newClient(t, aclUser(t, ctx, admin, user, dlockACL...))
		for _, lt := range lockTypes {
			lease, err := lt.take(c, "first-"+user+"-"+lt.name)(ctx)
			if err != nil {
				t.Fatalf("%s before revoking %s: %v", lt.name, rule, err)
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Fatalf("%s: Unlock before revoking %s: %v", lt.name, rule, err)
			}
		}
		if err := admin.Do(ctx, "ACL", "SETUSER", user, "-"+rule[1:]).Err(); err != nil {
			t.Fatal(err)
		}
		for _, lt := range lockTypes {
			for _, behind := range []bool{false, true} {
				revokedAttempt(t, ctx, admin, c, other, lt, rule, behind)
			}
		}
	}
}

// revokedAttempt takes lt as c, whose user has lost rule, behind a holder
// (other's) or not, and checks what it left: a refused attempt nothing, so
// that the lock is free for other once its holder let go; any attempt no
// key without expiry.
func revokedAttempt(t *testing.T, ctx context.Context, admin *redis.Client, c, other *dlock.Client, lt lockType, rule string, behind bool) {
	name := "revoked-" + rule[1:] + "-" + lt.name
	holdWith := lt.hold // a reader behind a writer
	if holdWith == nil {
		holdWith = lt.take
	}
	if behind {
		name += "-behind"
	} else if lt.hold != nil {
		return // always behind
	}
	var holder *dlock.Lease
	if behind {
		var err error
		if holder, err = holdWith(other, name)(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.Do(ctx, "ACL", "LOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	try, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	lease, err := lt.take(c, name)(try)
	cancel()
	if holder != nil {
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	switch {
	case err == nil && refusedInScripts(t, ctx, admin, "revoked-"+rule[1:]) > 0:
		t.Errorf("without %s, %s succeeded past a command Redis refused it", rule, lt.name)
		_ = lease.Unlock(ctx)
	case err == nil:
		if err := lease.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrPermission) {
			t.Errorf("without %s, %s: Unlock: %v; want nil or ErrPermission", rule, lt.name, err)
		}
	case errors.Is(err, dlock.ErrPermission) || behind && errors.Is(err, dlock.ErrNotAcquired):
		// Nothing applied: the lock is free for anyone.
		free, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		held, err := holdWith(other, name)(free)
		cancel()
		if err != nil {
			t.Errorf("without %s, a refused %s (behind a holder: %v) left the lock taken: %v", rule, lt.name, behind, err)
		} else if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	default:
		t.Errorf("without %s, %s: %v; want ErrPermission, or the lock", rule, lt.name, err)
	}
	for _, key := range keysOn(t, ctx, admin, "*{"+name+"*") {
		if strings.HasSuffix(key, "}:permits") || strings.HasSuffix(key, "}:leader") {
			continue // kept for good by design
		}
		if ttl := admin.PTTL(ctx, key).Val(); ttl == -1 {
			t.Errorf("without %s, %s (behind a holder: %v) left %s with no expiry (%v)", rule, lt.name, behind, key, err)
		}
	}
}

// refusedInScripts is how many of user's commands inside scripts the ACL
// LOG has refused since its reset.
func refusedInScripts(t *testing.T, ctx context.Context, admin *redis.Client, user string) int {
	t.Helper()
	entries, err := admin.Do(ctx, "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		fields, _ := e.([]any)
		var who, context string
		for i := 0; i+1 < len(fields); i += 2 {
			switch fields[i] {
			case "username":
				who, _ = fields[i+1].(string)
			case "context":
				context, _ = fields[i+1].(string)
			}
		}
		if who == user && (context == "lua" || context == "script") {
			n++
		}
	}
	return n
}

// The same of a Redlock: each node's rights are checked at its first
// acquire, and a node that refuses later fails the attempt, which every
// node gives back. The fencing counters stay by design.
func TestACL_RightsRevokedAfterARedlocksFirstLockLeaveNothingHalfApplied(t *testing.T) {
	t.Parallel()
	servers := redistest.StartMasters(t, 3)
	ctx := ctxFor(t, 2*time.Minute)
	var admins []redis.UniversalClient
	for _, s := range servers {
		admins = append(admins, s.Client())
	}
	other := mustRedlock(t, admins, dlock.WithRestartGuard(0))
	for _, rule := range scriptRights() {
		user := "revoked-" + rule[1:]
		var users []redis.UniversalClient
		for _, admin := range admins {
			users = append(users, aclUser(t, ctx, admin.(*redis.Client), user, dlockACL...))
		}
		r := mustRedlock(t, users, dlock.WithRestartGuard(0))
		lease, err := r.Mutex("first-" + user).TryLock(ctx)
		if err != nil {
			t.Fatalf("before revoking %s: %v", rule, err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("Unlock before revoking %s: %v", rule, err)
		}
		for _, admin := range admins {
			if err := admin.Do(ctx, "ACL", "SETUSER", user, "-"+rule[1:]).Err(); err != nil {
				t.Fatal(err)
			}
		}
		name := "revoked-" + user
		lease, err = r.Mutex(name).TryLock(ctx)
		switch {
		case err == nil:
			if err := lease.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrPermission) {
				t.Errorf("without %s: Unlock: %v; want nil or ErrPermission", rule, err)
			}
		case errors.Is(err, dlock.ErrPermission):
			held, err := other.Mutex(name).TryLock(ctx)
			if err != nil {
				t.Errorf("without %s, a refused Redlock left the lock taken: %v", rule, err)
			} else if err := held.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("without %s: %v; want ErrPermission, or the lock", rule, err)
		}
		for _, admin := range admins {
			for _, key := range keysOn(t, ctx, admin, "*{"+name+"}*") {
				if strings.HasSuffix(key, "}:fence") {
					continue // kept for good by design
				}
				if ttl := admin.PTTL(ctx, key).Val(); ttl == -1 {
					t.Errorf("without %s, a Redlock left %s with no expiry (%v)", rule, key, err)
				}
			}
		}
	}
}

// scriptRights are the rights of dlockACL that grant a command a script
// runs: those a revocation mid-way could leave half applied.
func scriptRights() []string {
	var rights []string
	for _, rule := range dlockACL {
		switch rule {
		case "+evalsha", "+script|load", "+subscribe", "+unsubscribe", "+ping", "+hello":
			continue // not run by a script
		}
		if rule[0] == '+' {
			rights = append(rights, rule)
		}
	}
	return rights
}
