package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
)

// status --json says in state whether the lock is free, held (no one else
// gets in), shared (readers, or some of a Semaphore's permits: more may
// join) or full (every permit held); type is the kind of lock, apart.
func TestStatus_StateIsApartFromTheType(t *testing.T) {
	url, locks := testRedis(t)
	ctx := context.Background()
	status := func(name string) (statusJSON, map[string]any, string) {
		t.Helper()
		code, stdout, stderr := runDlock(t, url, "status", "--json", name)
		var s statusJSON
		var raw map[string]any
		if code != 0 || json.Unmarshal([]byte(stdout), &s) != nil || json.Unmarshal([]byte(stdout), &raw) != nil {
			t.Fatalf("status --json %s: exit %d\n%s%s", name, code, stdout, stderr)
		}
		_, text, _ := runDlock(t, url, "status", name)
		return s, raw, text
	}
	lock := func(l *dlock.Lease, err error) *dlock.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	lock(locks.Mutex("m").Lock(ctx))
	lock(locks.RWMutex("rw").Lock(ctx))
	lock(locks.RWMutex("readers").RLock(ctx))
	lock(locks.RWMutex("readers").RLock(ctx))
	lock(locks.Semaphore("some", 3).Acquire(ctx))
	for range 2 {
		lock(locks.Semaphore("all", 2).Acquire(ctx))
	}
	for _, tc := range []struct {
		name, state string
		lockType    string
	}{
		{"nothing", "free", ""},
		{"m", "held", "Mutex"},
		{"rw", "held", "RWMutex"},
		{"readers", "shared", "RWMutex"},
		{"some", "shared", "Semaphore"},
		{"all", "full", "Semaphore"},
	} {
		s, raw, text := status(tc.name)
		if s.State != tc.state || s.Type != tc.lockType || s.Held != (tc.state != "free") {
			t.Errorf("%s: state %q, type %q, held %v; want %q, %q", tc.name, s.State, s.Type, s.Held, tc.state, tc.lockType)
		}
		if _, ok := raw["type"]; ok != (tc.lockType != "") {
			t.Errorf("%s: JSON %v: want a type exactly when held", tc.name, raw)
		}
		if !strings.Contains(text, "state:       "+tc.state+"\n") {
			t.Errorf("%s: the text does not say state %s:\n%s", tc.name, tc.state, text)
		}
	}
}

// The line a waiting run draws never names the run itself as a holder it
// waits for: it holds the lock itself when its Lock returns as the line is
// drawn, and a shared run may hold beside the reader it waits behind.
func TestRun_TheWaitingLineNeverNamesTheRunItself(t *testing.T) {
	_, locks := testRedis(t)
	ctx := context.Background()
	const self, other = "host-a/pid-1/self", "host-b/pid-2/other"
	theirs, err := locks.RWMutex("job", dlock.WithOwner(other)).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locks.RWMutex("job", dlock.WithOwner(self)).RLock(ctx); err != nil {
		t.Fatal(err)
	}
	line := waitingLine(ctx, locks, "job", self, 3*time.Second)
	if strings.Contains(line, admin.OwnerHash(self)) || !strings.Contains(line, admin.OwnerHash(other)) {
		t.Fatalf("held by the run and another: %q; want only the other named", line)
	}
	if err := theirs.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	line = waitingLine(ctx, locks, "job", self, 3*time.Second)
	if strings.Contains(line, admin.OwnerHash(self)) || strings.Contains(line, "held by") {
		t.Fatalf("held by the run alone: %q; want no holder named", line)
	}
}

// status names an Election and shows its leader's value, and says how many
// of a Semaphore's permits are held whatever holder info each carries.
func TestStatus_NamesAnElectionAndItsLeader(t *testing.T) {
	url, locks := testRedis(t)
	ctx := context.Background()
	if _, err := locks.Election("leader").Campaign(ctx, "node-a:8080"); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runDlock(t, url, "status", "--json", "leader")
	var s statusJSON
	if code != 0 || json.Unmarshal([]byte(stdout), &s) != nil || s.Type != "Election" || s.LeaderValue != "node-a:8080" {
		t.Fatalf("status --json of an Election: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, text, _ := runDlock(t, url, "status", "leader"); !strings.Contains(text, "type:        Election") ||
		!strings.Contains(text, "leader:      node-a:8080") {
		t.Fatalf("status of an Election:\n%s", text)
	}

	for _, who := range []string{"a", "b"} {
		if _, err := locks.Semaphore("sem", 3, dlock.WithHolderInfo(admin.HolderInfo{User: who})).Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, text, _ := runDlock(t, url, "status", "sem"); !strings.Contains(text, "permits:     2 of 3 held") {
		t.Fatalf("status of a Semaphore with 2 of 3 permits held by two holders:\n%s", text)
	}
}

// Issue 36 (F3): a full Semaphore is "2 of 2 permits held" wherever its
// holders are named (run's busy report and waiting lines, unlock's
// question, ls, watch), as status's "2 of 2 held"; not "held by 2 of 2
// permits", which read as if permits held the lock.
func TestCLI_ASemaphoresHoldersAreItsPermitsHeld(t *testing.T) {
	url, locks := testRedis(t)
	ctx, must := context.Background(), mustLease(t)
	for _, host := range []string{"web-1", "web-2"} {
		must(locks.Semaphore("pool", 2, dlock.WithHolderInfo(admin.HolderInfo{Hostname: host})).Acquire(ctx))
	}
	const held = "2 of 2 permits held"
	check := func(what, out, want string) {
		t.Helper()
		if !strings.Contains(out, want) || strings.Contains(out, "held by") || strings.Contains(out, "2/2") {
			t.Errorf("%s:\n%s\nwant %q", what, out, want)
		}
	}
	_, _, stderr := runDlock(t, url, "run", "--permits", "2", "-n", "pool", "--", "true")
	check("run's busy report", stderr, `"pool" is busy, `+held+`: not acquired (--wait 0)`)
	_, _, stderr = runDlock(t, url, "run", "--permits", "2", "--wait", "1s", "pool", "--", "true")
	check("run's waiting line outside a terminal", stderr, `dlock run: waiting for "pool", `+held+"\n")
	p := startDlock(t, url, "n\n", "unlock", "--force", "pool")
	p.wait(t, 15*time.Second)
	check("unlock's question", p.stderr.String(), `Remove the lock "pool", `+held+`?`)
	_, stdout, _ := runDlock(t, url, "ls")
	check("ls", stdout, held)
	waitLine, stop := plainWatch(t, url, "pool")
	check("watch", waitLine("pool", "pool"), `holders="`+held+`"`)
	stop()
	term := startTerminal(t, fmt.Sprintf("%s run --redis %s --permits 2 pool -- true\nsleep 600\n", dlockBin, url))
	term.waitScreen("; " + held + " (renewed")
}
