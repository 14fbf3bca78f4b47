package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Lock names, owner ids and holder info are written by whoever uses the
// lock (or has Redis): ls and status print none of their control
// characters raw, which would let them move the operator's cursor, retitle
// the terminal, or forge lines of the listing. They are shown escaped.
func TestLsAndStatus_PrintNoControlCharacterOfNamesOwnersOrHolderInfo(t *testing.T) {
	srv := redistest.Start(t)
	url, rdb := "redis://"+srv.Addr(), srv.Client()
	locks := newLocks(t, rdb)
	ctx, must := context.Background(), mustLease(t)
	const (
		mutexName = "m\x1b[2J\u009b31m"
		rwName    = "rw\rforged line"
	)
	hostile := dlock.HolderInfo{Hostname: "h\x1b]0;owned\x07", Program: "p\nfree  Mutex", User: "u"}
	must(locks.Mutex(mutexName, dlock.WithHolderInfo(hostile)).Lock(ctx))
	must(locks.RWMutex(rwName, dlock.WithOwner("placeholder"), dlock.WithHolderInfo(hostile)).Lock(ctx))
	forgeOwner(t, rdb, rwName, "placeholder", "o\x1b[1A\x7f")
	runs := [][]string{{"ls"}, {"status", mutexName}, {"status", rwName}}
	for _, args := range runs {
		code, stdout, stderr := runDlock(t, url, args...)
		if code != 0 {
			t.Fatalf("%q: exit %d\n%s", args, code, stderr)
		}
		noControl(t, fmt.Sprintf("%q", args), stdout)
	}
}

// forgeOwner renames owner from to to in the keys of the lock name, as a
// program in another language, or an older dlock, could have written it:
// dlock's Go API refuses an owner id that does not print.
func forgeOwner(t *testing.T, rdb redis.UniversalClient, name, from, to string) {
	t.Helper()
	const rename = `
local function swap(s) local i, j = string.find(s, ARGV[1], 1, true)
  if i then return string.sub(s, 1, i-1) .. ARGV[2] .. string.sub(s, j+1) end return s end
for _, key in ipairs(redis.call('KEYS', KEYS[1])) do
  local kind, ttl = redis.call('TYPE', key).ok, redis.call('PTTL', key)
  if kind == 'hash' then
    local h = redis.call('HGETALL', key) redis.call('DEL', key)
    for i = 1, #h, 2 do redis.call('HSET', key, swap(h[i]), swap(h[i+1])) end
  elseif kind == 'zset' then
    local z = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES') redis.call('DEL', key)
    for i = 1, #z, 2 do redis.call('ZADD', key, z[i+1], swap(z[i])) end
  end
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
end
return 1`
	if err := rdb.Eval(context.Background(), rename, []string{"dlock:{" + name + "}*"}, from, to).Err(); err != nil {
		t.Fatal(err)
	}
}

// noControl fails the test if out holds a control character, or does not
// show the escape it left out.
func noControl(t *testing.T, what, out string) {
	t.Helper()
	for _, r := range out {
		if r != '\n' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0)) {
			t.Fatalf("%s printed the control character %U:\n%q", what, r, out)
		}
	}
	if !strings.Contains(out, `\x1b`) {
		t.Fatalf("%s does not show the escape it left out:\n%s", what, out)
	}
}

// Issue 36.2: run's busy report and waiting line, and unlock --force's
// question, show an owner id escaped: raw, it retitled the terminal,
// cleared it and forged the line the operator was asked to confirm.
func TestRunAndUnlock_PrintNoControlCharacterOfOwners(t *testing.T) {
	srv := redistest.Start(t)
	url, rdb := "redis://"+srv.Addr(), srv.Client()
	locks := newLocks(t, rdb)
	const hostile = "o\x1b]0;owned\a\x1b[2J"
	mustLease(t)(locks.RWMutex("d", dlock.WithOwner("placeholder")).Lock(context.Background()))
	forgeOwner(t, rdb, "d", "placeholder", hostile)

	code, _, stderr := runDlock(t, url, "run", "--wait", "0", "d", "--", "true")
	if code != exitNotAcquired {
		t.Fatalf("run on a held lock: exit %d\n%s", code, stderr)
	}
	noControl(t, "run's busy report", stderr)
	p := startDlock(t, url, "n\n", "unlock", "--force", "d")
	if code := p.wait(t, 15*time.Second); code != exitFailure {
		t.Fatalf("unlock answered no: exit %d\n%s", code, &p.stderr)
	}
	noControl(t, "unlock's question", p.stderr.String())

	term := startTerminal(t, fmt.Sprintf("%s run --redis %s d -- true\nsleep 600\n", dlockBin, url))
	term.waitScreen(`held by o\x1b]0;owned\a\x1b[2J`)
	if title := term.tmux("display", "-p", "#{pane_title}"); strings.Contains(title, "owned") {
		t.Fatalf("the waiting line retitled the terminal: %q", title)
	}
}
