package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/redistest"
)

// lsJSON runs ls --json with args and decodes what it printed.
func lsJSON(t *testing.T, url string, args ...string) lsListing {
	t.Helper()
	code, stdout, stderr := runDlock(t, url, append([]string{"ls", "--json"}, args...)...)
	var l lsListing
	if code != 0 || json.Unmarshal([]byte(stdout), &l) != nil {
		t.Fatalf("ls --json %v: exit %d\n%s%s", args, code, stdout, stderr)
	}
	return l
}

func lockNames(l lsListing) []string {
	var names []string
	for _, lock := range l.Locks {
		names = append(names, lock.Name)
	}
	return names
}

// mustLease returns what fails t unless an acquisition succeeded.
func mustLease(t *testing.T) func(*dlock.Lease, error) *dlock.Lease {
	return func(l *dlock.Lease, err error) *dlock.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

// ls lists each lock once, whichever of its keys the scan met first, with
// its type, holders, TTL, waiters and last token; a key under dlock's prefix
// holding what dlock did not write is shown as not dlock's, a key outside the
// prefix not at all, and the secret owner token of a Mutex never.
func TestLs_ListsEveryLockOnceAndNoOwnerToken(t *testing.T) {
	srv := redistest.Start(t)
	url, raw, locks := "redis://"+srv.Addr(), srv.Client(), newLocks(t, srv.Client())
	ctx, must := context.Background(), mustLease(t)
	must(locks.Mutex("m").Lock(ctx))
	must(locks.RWMutex("rw", dlock.WithOwner("ops-host/42/writer")).Lock(ctx))
	must(locks.RWMutex("readers", dlock.WithOwner("r1")).RLock(ctx))
	must(locks.RWMutex("readers", dlock.WithOwner("r2")).RLock(ctx))
	must(locks.Semaphore("sem", 3).Acquire(ctx))
	released := must(locks.Mutex("released").Lock(ctx))
	if err := released.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// A waiter on m: registered once its Describe says so.
	waitCtx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		_, _ = locks.Mutex("m").Lock(waitCtx)
	}()
	t.Cleanup(func() { stopWaiting(); <-waited })
	waitFor(t, 10*time.Second, "a waiter registered on m", func() bool {
		info, err := locks.Describe(ctx, "m")
		return err == nil && info.WritersWaiting == 1
	})
	raw.Set(ctx, "dlock:{precious}", "my-precious-data", 0)
	raw.Set(ctx, "user:1", "not a lock", 0)
	ownerToken := raw.Get(ctx, "dlock:{m}").Val()
	if ownerToken == "" {
		t.Fatal("the Mutex m has no owner token under dlock:{m}")
	}

	l := lsJSON(t, url)
	if got, want := lockNames(l), []string{"m", "precious", "readers", "rw", "sem"}; !slices.Equal(got, want) || l.Cut {
		t.Fatalf("ls --json lists %v (cut %v); want %v, not cut", got, l.Cut, want)
	}
	byName := map[string]lsLockJSON{}
	for _, lock := range l.Locks {
		byName[lock.Name] = lock
	}
	for _, tc := range []struct {
		name, state    string
		lockType       string
		owners         []string
		writersWaiting int
	}{
		{"m", "held", "Mutex", []string{""}, 1},
		{"rw", "held", "RWMutex", []string{admin.OwnerHash("ops-host/42/writer")}, 0},
		{"readers", "shared", "RWMutex", slices.Sorted(slices.Values([]string{admin.OwnerHash("r1"), admin.OwnerHash("r2")})), 0},
		{"sem", "shared", "Semaphore", []string{""}, 0},
		{"precious", "foreign", "", nil, 0},
	} {
		got := byName[tc.name]
		var owners []string
		for _, h := range got.Holders {
			owners = append(owners, h.Owner)
		}
		slices.Sort(owners)
		if got.State != tc.state || got.Type != tc.lockType || !slices.Equal(owners, tc.owners) || got.WritersWaiting != tc.writersWaiting {
			t.Errorf("%s: %+v; want state %q, type %q, owners %q, %d writers waiting", tc.name, got, tc.state, tc.lockType, tc.owners, tc.writersWaiting)
		}
		if tc.state != "foreign" && (got.TTLMillis <= 0 || got.LastToken == 0 || got.NotDlocks != "") {
			t.Errorf("%s: ttl %d ms, last token %d, %q; want a TTL and a token", tc.name, got.TTLMillis, got.LastToken, got.NotDlocks)
		}
	}
	if !strings.Contains(byName["precious"].NotDlocks, "dlock:{precious}") {
		t.Errorf("precious: %q; want why it is not dlock's, naming the key", byName["precious"].NotDlocks)
	}
	if all := lockNames(lsJSON(t, url, "--all")); !slices.Contains(all, "released") {
		t.Errorf("ls --all lists %v; want the released lock, whose counter remains", all)
	}
	if got := lockNames(lsJSON(t, url, "r*")); !slices.Equal(got, []string{"readers", "rw"}) {
		t.Errorf("ls 'r*' lists %v; want readers, rw", got)
	}

	code, text, stderr := runDlock(t, url, "ls")
	if code != 0 {
		t.Fatalf("ls: exit %d\n%s%s", code, text, stderr)
	}
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "NAME") {
		t.Fatalf("ls printed %d lines; want a header and one line per lock:\n%s", len(lines), text)
	}
	// Aligned: every column starts where its header does.
	for _, column := range []string{"TYPE", "STATE", "TTL", "WAITING", "TOKEN", "HOLDERS"} {
		at := strings.Index(lines[0], column)
		for _, line := range lines[1:] {
			if at <= 0 || len(line) <= at || line[at-1] != ' ' || line[at] == ' ' {
				t.Errorf("column %s (at %d) is not aligned:\n%s", column, at, text)
				break
			}
		}
	}
	for _, want := range []string{admin.OwnerHash("ops-host/42/writer"), "not dlock's", "1 of 3 permits held", admin.OwnerHash("r1"), admin.OwnerHash("r2")} {
		if !strings.Contains(text, want) {
			t.Errorf("ls does not show %q:\n%s", want, text)
		}
	}
	_, jsonText, _ := runDlock(t, url, "ls", "--json", "--all")
	if strings.Contains(text, ownerToken) || strings.Contains(jsonText, ownerToken) {
		t.Fatalf("ls shows the Mutex's owner token %q:\n%s\n%s", ownerToken, text, jsonText)
	}
	if strings.Contains(text, "ops-host/42/writer") || strings.Contains(jsonText, "ops-host/42/writer") {
		t.Fatalf("ls shows an owner id, which WithOwner joins its holds with:\n%s\n%s", text, jsonText)
	}
}

// --limit bounds the names one ls looks at; a listing it cut says so (on
// stderr, and "cut" in JSON), and one it did not cut does not.
func TestLs_LimitCutsTheListingAndSaysSo(t *testing.T) {
	url, locks := testRedis(t)
	ctx, must := context.Background(), mustLease(t)
	for i := range 5 {
		must(locks.Mutex(fmt.Sprintf("job-%d", i)).Lock(ctx))
	}
	if l := lsJSON(t, url, "--limit", "3"); len(l.Locks) != 3 || !l.Cut {
		t.Fatalf("--limit 3 of 5: %d locks, cut %v; want 3, cut", len(l.Locks), l.Cut)
	}
	code, stdout, stderr := runDlock(t, url, "ls", "--limit", "3")
	if code != 0 || strings.Count(stdout, "\n") != 4 || !strings.Contains(stderr, "--limit") {
		t.Fatalf("ls --limit 3 of 5: exit %d; want a header, 3 lines and a note of the cut on stderr\n%s%s", code, stdout, stderr)
	}
	if l := lsJSON(t, url, "--limit", "5"); len(l.Locks) != 5 || l.Cut {
		t.Fatalf("--limit 5 of 5: %d locks, cut %v; want 5, not cut", len(l.Locks), l.Cut)
	}
	if code, _, stderr := runDlock(t, url, "ls", "--limit", "5"); code != 0 || stderr != "" {
		t.Fatalf("ls --limit 5 of 5: exit %d, stderr %q; want no note", code, stderr)
	}
}

// On a cluster, ls scans every master, given one node's address.
func TestLs_ListsTheLocksOfEveryMasterOfACluster(t *testing.T) {
	cluster := redistest.StartCluster(t)
	locks := newLocks(t, cluster.Client())
	ctx, must := context.Background(), mustLease(t)
	var want []string
	for i := range 9 {
		name := fmt.Sprintf("shard-%d", i)
		must(locks.Mutex(name).Lock(ctx))
		want = append(want, name)
	}
	for i, node := range cluster.Nodes {
		if n := node.Client().DBSize(ctx).Val(); n == 0 {
			t.Fatalf("master %d holds none of the locks: pick other names", i)
		}
	}
	if got := lockNames(lsJSON(t, "redis://"+cluster.Addrs()[1])); !slices.Equal(got, want) {
		t.Fatalf("ls on a cluster lists %v; want %v", got, want)
	}
}

// Bad arguments are usage errors, with the rule broken.
func TestLsAndWatch_RefuseBadArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		rule string
	}{
		{[]string{"ls", "--limit", "0"}, "dlock ls: --limit must be at least 1"},
		{[]string{"ls", "a", "b"}, "dlock ls: want at most one PATTERN"},
		{[]string{"ls", "x{y}"}, `dlock ls: PATTERN "x{y}" contains '{' or '}'`},
		{[]string{"watch", "--interval", "0s"}, "dlock watch: --interval must be at least 100ms"},
		{[]string{"watch", "a", "b"}, "dlock watch: want at most one PATTERN or NAME"},
		{[]string{"watch", "x{y}"}, `dlock watch: PATTERN "x{y}" contains '{' or '}'`},
	} {
		code, stdout, stderr := runDlock(t, "redis://127.0.0.1:1", tc.args...)
		want := tc.rule + "\nRun 'dlock " + tc.args[0] + " --help' for usage.\n"
		if code != exitUsage || stdout != "" || stderr != want {
			t.Errorf("dlock %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, stdout, stderr, want)
		}
	}
}

// newLocks is a dlock Client on rdb, closed at the test's end.
func newLocks(t testing.TB, rdb redis.UniversalClient) *dlock.Client {
	t.Helper()
	locks, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locks.Close() })
	return locks
}

// Issue 36.9: a Semaphore's permits held by holders with different holder
// info (one line each in Describe) all count: ls and watch say 2 of 2, as
// status says 2 of 2.
func TestLsAndWatch_CountEveryPermitOfASemaphore(t *testing.T) {
	srv := redistest.Start(t)
	url, locks := "redis://"+srv.Addr(), newLocks(t, srv.Client())
	ctx, must := context.Background(), mustLease(t)
	for _, host := range []string{"web-1", "web-2"} {
		must(locks.Semaphore("pool", 2, dlock.WithHolderInfo(admin.HolderInfo{Hostname: host})).Acquire(ctx))
	}
	code, stdout, stderr := runDlock(t, url, "ls")
	if code != 0 || !strings.Contains(stdout, "2 of 2 permits held") || !strings.Contains(stdout, "full") {
		t.Fatalf("ls: exit %d, want pool full with 2 of 2 permits held\n%s%s", code, stdout, stderr)
	}
	log := filepath.Join(t.TempDir(), "watch")
	watch := exec.Command(dlockBin, "watch", "--redis", url, "pool")
	file, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	watch.Stdout = file
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Process.Kill(); _ = watch.Wait() }()
	var line []byte
	waitFor(t, 15*time.Second, "watch prints pool's line", func() bool {
		line, _ = os.ReadFile(log)
		return strings.Contains(string(line), "\n")
	})
	if !strings.Contains(string(line), "2 of 2 permits held") {
		t.Fatalf("watch: %s\nwant 2 of 2 permits held", line)
	}
}

// Issue 36.11: the holders column names a holder by the holder info it
// stored (host, pid, program), as status does, rather than its owner id's
// hash or "(owner hidden)"; a single holder too long for the column is cut,
// not replaced by "…+1 more".
func TestLs_HoldersColumnShowsHolderInfoAndCutsALongOwner(t *testing.T) {
	srv := redistest.Start(t)
	url, locks := "redis://"+srv.Addr(), newLocks(t, srv.Client())
	ctx, must := context.Background(), mustLease(t)
	web := dlock.WithHolderInfo(admin.HolderInfo{Hostname: "web-1", PID: 42, Program: "deploy.sh"})
	must(locks.Mutex("m", web).Lock(ctx))
	must(locks.RWMutex("rw", web).Lock(ctx)) // the call's owner: a random id
	long := admin.HolderInfo{Hostname: strings.Repeat("a-very-long-host-name.", 4)}
	must(locks.RWMutex("long", dlock.WithHolderInfo(long)).Lock(ctx))
	code, stdout, stderr := runDlock(t, url, "ls")
	if code != 0 {
		t.Fatalf("ls: exit %d\n%s", code, stderr)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(stdout, "\n") {
		if name, _, ok := strings.Cut(line, " "); ok {
			rows[name] = line
		}
	}
	for _, name := range []string{"m", "rw"} {
		if row := rows[name]; !strings.Contains(row, "web-1 pid 42 deploy.sh write") || strings.Contains(row, "hidden") {
			t.Errorf("%s: %q; want its holder shown by its info, web-1 pid 42 deploy.sh write", name, row)
		}
	}
	if row := rows["long"]; !strings.Contains(row, "a-very-long-host-name.a-very") || strings.Contains(row, "more") {
		t.Errorf("long: %q; want the beginning of its one holder, cut", row)
	}
}

// Issue 36.11: --limit N shows the first N locks in use by name, as the
// table is sorted, whatever order SCAN met them in; names that are free
// (only their fencing counter left) do not count.
func TestLs_LimitShowsTheFirstNLocksByName(t *testing.T) {
	url, locks := testRedis(t)
	ctx, must := context.Background(), mustLease(t)
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		must(locks.Mutex(name).Lock(ctx))
		free := must(locks.Mutex(name + "-free").Lock(ctx))
		if err := free.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l := lsJSON(t, url, "--limit", "3")
	if got := lockNames(l); !slices.Equal(got, []string{"a", "b", "c"}) || !l.Cut {
		t.Fatalf("--limit 3: %v, cut %v; want a, b, c, cut", got, l.Cut)
	}
	if l := lsJSON(t, url, "--limit", "3", "--all"); !slices.Equal(lockNames(l), []string{"a", "a-free", "b"}) || !l.Cut {
		t.Fatalf("--limit 3 --all: %v, cut %v; want a, a-free, b, cut", lockNames(l), l.Cut)
	}
}

// Issue 36.11: status counts waiters in the words of the lock's type:
// writers and readers for an RWMutex, waiters for the others.
func TestStatus_CountsWaitersInTheWordsOfTheType(t *testing.T) {
	url, locks := testRedis(t)
	ctx, must := context.Background(), mustLease(t)
	must(locks.Mutex("m").Lock(ctx))
	must(locks.RWMutex("rw").Lock(ctx))
	for name, want := range map[string]string{"m": "waiting:     0\n", "rw": "waiting:     0 writers, 0 readers\n"} {
		if code, stdout, _ := runDlock(t, url, "status", name); code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("status %s: exit %d, want %q:\n%s", name, code, want, stdout)
		}
	}
}

// Issue 36: ls pads its columns by the columns a terminal gives each
// character, as cutTo counts them: a name of wide characters leaves the
// next column where a name of as many columns does.
func TestLs_AlignsColumnsOfWideCharacters(t *testing.T) {
	srv := redistest.Start(t)
	url, locks := "redis://"+srv.Addr(), newLocks(t, srv.Client())
	ctx, must := context.Background(), mustLease(t)
	must(locks.Mutex("漢字漢字漢字").Lock(ctx))
	must(locks.Mutex("abcdefghijkl").Lock(ctx))
	code, stdout, stderr := runDlock(t, url, "ls")
	if code != 0 {
		t.Fatalf("ls: exit %d\n%s%s", code, stdout, stderr)
	}
	columnOf := func(line, field string) int {
		i := strings.Index(line, field)
		if i < 0 {
			t.Fatalf("no %q in %q", field, line)
		}
		return stringColumns(line[:i])
	}
	at := map[string]int{}
	for _, line := range strings.Split(stdout, "\n") {
		for _, name := range []string{"NAME", "漢字漢字漢字", "abcdefghijkl"} {
			if strings.HasPrefix(line, name) {
				field := "TYPE"
				if name != "NAME" {
					field = "Mutex"
				}
				at[name] = columnOf(line, field)
			}
		}
	}
	if len(at) != 3 || at["NAME"] != at["漢字漢字漢字"] || at["NAME"] != at["abcdefghijkl"] {
		t.Fatalf("the TYPE column starts at columns %v, want one:\n%s", at, stdout)
	}
}
