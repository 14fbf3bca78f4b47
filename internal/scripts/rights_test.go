package scripts

import (
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// An acquire's rights_refused (common.lua) must check every command its lock
// type's scripts run on keys, before it writes anything: one it missed
// could be refused part-way through a later script (see rightsFor).
func TestScripts_RightsCoverEveryCommand(t *testing.T) {
	listed := regexp.MustCompile(`local SCRIPT_COMMANDS = \{(.*?)\}`)
	run := regexp.MustCompile(`(?:redis\.p?call\(|(?:call|text)_or_wrongtype\(|call_on\([^,]+, )'([A-Z]+)'`)
	for _, set := range typeScripts {
		checked, acquires := map[string]bool{}, 0
		for _, s := range set {
			if m := listed.FindStringSubmatch(assembled[s].src); m != nil {
				acquires++
				for _, c := range regexp.MustCompile(`'([a-z]+)'`).FindAllStringSubmatch(m[1], -1) {
					checked[c[1]] = true
				}
			}
		}
		if acquires == 0 {
			continue // an operator's script (Describe, ForceUnlock) takes nothing
		}
		for _, s := range set {
			for _, m := range run.FindAllStringSubmatch(assembled[s].src, -1) {
				if command := strings.ToLower(m[1]); !checked[command] {
					t.Errorf("script %s runs %s, which its type's acquire does not check", s.Hash()[:8], m[1])
				}
			}
		}
	}
}

// A command named by a variable escapes the rights check: only PUBLISH
// or SPUBLISH (as the client says) goes so, on a channel, not a key.
func TestScripts_RunCommandsByName(t *testing.T) {
	byVariable := regexp.MustCompile(`(?:redis\.p?call|(?:call|text)_or_wrongtype)\(([A-Za-z_][\w\[\]]*), ([\w.]+)`)
	channel := regexp.MustCompile(`(?i)chan|observers`)
	for s, a := range assembled {
		for line := range strings.SplitSeq(a.src, "\n") {
			for _, m := range byVariable.FindAllStringSubmatch(uncommented(line), -1) {
				if !channel.MatchString(m[2]) {
					t.Errorf("script %s runs a command named by %s on %s, not a channel", s.Hash()[:8], m[1], m[2])
				}
			}
		}
	}
}

// A refusal by an ACL inside a script fails it: redis.pcall, which would
// hand it back as a reply, goes only through call_or_wrongtype (common.lua)
// and call_on (foreign.lua), and their text_ forms, which return WRONGTYPE
// alone. An acquire that
// skipped its rights check (rights.go) would otherwise read a refusal as
// another program's key, or go on past a write it did not make.
func TestScripts_PcallOnlyCatchesWrongType(t *testing.T) {
	for s, a := range assembled {
		for line := range strings.SplitSeq(a.src, "\n") {
			code := strings.TrimSpace(uncommented(line))
			if strings.Contains(code, "redis.pcall(") && code != "local reply = redis.pcall(...)" {
				t.Errorf("script %s: %s; want call_or_wrongtype", s.Hash()[:8], code)
			}
		}
	}
}

// An acquire told that its Client knows the user's rights (RightsKnown, its
// last ARGV) checks none: a user without ZPOPMIN, which only a Mutex's
// release runs, is refused the lock when it is checked, and takes it when
// not. An RWMutex's acquire checks none on a clean lock, whose grant it
// undoes whole when a command is refused; elsewhere it checks always (it
// could not give back others' counts): without RENAME, which only its
// release runs, a reader beside a writer is refused.
func TestScripts_AcquireWithRightsKnownChecksNone(t *testing.T) {
	ctx, admin := setup(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "nopop", "on", ">pw", "~*", "&*", "+@all", "-flushall", "-zpopmin", "-rename").Err(); err != nil {
		t.Fatal(err)
	}
	user := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, Username: "nopop", Password: "pw"})
	t.Cleanup(func() { _ = user.Close() })
	keys := []string{lockKey, fenceKey, "t:{m}:void:" + tok("a"), waitersKey}
	_, err := AcquireReply(MutexAcquire.Run(ctx, user, keys, tok("a"), 10000, "", 3000, "", "", ""))
	if err == nil || !strings.Contains(err.Error(), "zpopmin") {
		t.Fatalf("checked: %v; want NOPERM naming zpopmin", err)
	}
	res, err := AcquireReply(MutexAcquire.Run(ctx, user, keys, tok("a"), 10000, "", 3000, "", "", RightsKnown))
	if err != nil || res[0] != 1 {
		t.Fatalf("with rights known: %v, %v; want the lock", res, err)
	}
	rwKeys := []string{"t:{rw}", "t:{rw}:holds", "t:{rw}:wwait", "t:{rw}:rwait", "t:{rw}:rpass", "t:{rw}:wchan", "t:{rw}:rchan", "t:{rw}:fence", "t:{rw}:void"}
	res, err = AcquireReply(RWAcquire.Run(ctx, user, rwKeys, argvOf(RWAcquireArgs{Acquire: acq("w"+tok("b")+"o", 10000, "")}, RightsKnown)...))
	if err != nil || res[0] != 1 {
		t.Fatalf("a clean RWMutex lock with rights known: %v, %v; want the lock", res, err)
	}
	_, err = AcquireReply(RWAcquire.Run(ctx, user, rwKeys, argvOf(RWAcquireArgs{Acquire: acq("r"+tok("c")+"p", 10000, "")}, RightsKnown)...))
	if err == nil || !strings.Contains(err.Error(), "rename") {
		t.Fatal("an RWMutex acquire with rights known, beside a holder, was not checked for a right its release needs")
	}
}

// A clean RWMutex acquire told the rights are known, refused a command
// part-way (a right taken away since its Client's check), fails with the
// refusal and leaves neither state nor holds: nobody holds the lock.
func TestRWAcquire_RefusedPartWayOnACleanLockLeavesNothing(t *testing.T) {
	ctx, admin := setup(t)
	// The last two also lose what the undo runs.
	for _, commands := range [][]string{{"zadd"}, {"pexpireat"}, {"hset"}, {"set"}, {"pexpireat", "del"}, {"hset", "del"}} {
		command := strings.Join(commands, "+")
		user := "no" + strings.Join(commands, "")
		rules := []any{"ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-flushall"}
		for _, c := range commands {
			rules = append(rules, "-"+c)
		}
		if err := admin.Do(ctx, rules...).Err(); err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, Username: user, Password: "pw"})
		t.Cleanup(func() { _ = rdb.Close() })
		member := hold("w", "1", "alice")
		_, err := AcquireReply(RWAcquire.Run(ctx, rdb, withTombstone(member[1:33]), argvOf(RWAcquireArgs{Acquire: acq(member, 10000, "")}, RightsKnown)...))
		if err == nil || !regexp.MustCompile(`NOPERM|can't run this command|ACL failure|No permissions`).MatchString(err.Error()) {
			t.Errorf("without %s: %v; want a refusal", command, err)
		}
		if n := admin.Exists(ctx, rwState, rwHolds).Val(); n != 0 {
			t.Errorf("without %s: %d of the state and holds left", command, n)
		}
		if ttl := admin.PTTL(ctx, rwFence).Val(); ttl == -1 {
			t.Errorf("without %s: the counter left with no expiry", command)
		}
	}
}

// A Semaphore acquire told the rights are known, refused a command
// part-way (a right taken away since its Client's check), fails with the
// refusal and leaves no key without expiry: alone or beside a holder.
func TestSemAcquire_RefusedPartWayLeavesNoKeyWithoutExpiry(t *testing.T) {
	ctx, admin := setup(t)
	for _, command := range []string{"zadd", "hset", "pexpire"} {
		for _, beside := range []bool{false, true} {
			if err := admin.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if beside {
				if got := run(t, ctx, admin, SemAcquire, with(semAcquireKeys, tok("b")), argvOf(SemAcquireArgs{Permits: 4, Acquire: acq(tok("b"), 10000, "")}, "")...); got[0] != 1 {
					t.Fatalf("the holder beside was refused: %v", got)
				}
			}
			user := "no" + command
			if err := admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">pw", "~*", "&*", "+@all", "-flushall", "-"+command).Err(); err != nil {
				t.Fatal(err)
			}
			rdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, Username: user, Password: "pw"})
			t.Cleanup(func() { _ = rdb.Close() })
			_, err := AcquireReply(SemAcquire.Run(ctx, rdb, with(semAcquireKeys, tok("a")), argvOf(SemAcquireArgs{Permits: 4, Acquire: acq(tok("a"), 10000, "")}, RightsKnown)...))
			if err == nil || !regexp.MustCompile(`NOPERM|can't run this command|ACL failure|No permissions`).MatchString(err.Error()) {
				t.Errorf("without %s (beside a holder: %v): %v; want a refusal", command, beside, err)
			}
			for _, key := range semKeys[:3] {
				if ttl := admin.PTTL(ctx, key).Val(); ttl == -1 {
					t.Errorf("without %s (beside a holder: %v): %s left with no expiry", command, beside, key)
				}
			}
		}
	}
}
