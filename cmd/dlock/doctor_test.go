package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// doctorChecks are the checks doctor runs, in the order it prints them.
var doctorChecks = []string{"maxmemory-policy", "persistence", "replication", "cluster", "version", "rights", "round-trip", "clock"}

// doctorReport runs doctor --json against url and returns its exit code
// and its checks by name, failing the test unless the JSON has every check.
func doctorReport(t *testing.T, url string) (int, map[string]doctorCheck) {
	t.Helper()
	code, stdout, stderr := runDlock(t, url, "doctor", "--json")
	var report doctorJSON
	if err := json.Unmarshal([]byte(stdout), &report); err != nil {
		t.Fatalf("doctor --json: exit %d, not JSON (%v):\n%s%s", code, err, stdout, stderr)
	}
	checks := map[string]doctorCheck{}
	var names []string
	for _, c := range report.Checks {
		checks[c.Name] = c
		names = append(names, c.Name)
		if c.Verdict != "pass" && c.Verdict != "warn" && c.Verdict != "fail" || c.Reason == "" {
			t.Errorf("check %+v: want a verdict of pass, warn or fail and a reason", c)
		}
	}
	if !slices.Equal(names, doctorChecks) {
		t.Fatalf("doctor --json checks %q; want %q\n%s", names, doctorChecks, stdout)
	}
	return code, checks
}

// One server, configured wrong in turn: doctor passes it while it is fit
// for locks, and fails the check that finds each fault, exit 1.
func TestDoctor_FindsWhatMakesAServerUnfitForLocks(t *testing.T) {
	var lacking []string // the README's rights but ZADD, which waiters' queues need
	for _, r := range redistest.DlockACL {
		if r != "+zadd" {
			lacking = append(lacking, r)
		}
	}
	var otherPrefix []string // the README's rights, for a program using WithPrefix("myapp:")
	for _, r := range readmeACL(t) {
		otherPrefix = append(otherPrefix, strings.NewReplacer("~dlock:*", "~myapp:*", "&dlock:*", "&myapp:*").Replace(r))
	}
	args := append(redistest.UserArgs("locks", "pw", redistest.DlockACL), redistest.UserArgs("nozadd", "pw", lacking)...)
	srv := redistest.Start(t, append(args, redistest.UserArgs("myapp", "pw", otherPrefix)...)...)
	url, rdb, ctx := "redis://"+srv.Addr(), srv.Client(), context.Background()

	t.Run("healthy", func(t *testing.T) {
		code, stdout, stderr := runDlock(t, url, "doctor")
		if code != 0 || strings.Contains(stdout, "fail ") {
			t.Fatalf("doctor on a healthy server: exit %d\n%s%s", code, stdout, stderr)
		}
		for _, name := range doctorChecks {
			if !strings.Contains(stdout, name) {
				t.Errorf("the text does not name the check %s:\n%s", name, stdout)
			}
		}
		code, checks := doctorReport(t, url)
		if code != 0 {
			t.Fatalf("doctor --json: exit %d: %+v", code, checks)
		}
		for _, name := range []string{"maxmemory-policy", "cluster", "version", "rights", "round-trip", "clock"} {
			if checks[name].Verdict != "pass" {
				t.Errorf("%s: %+v; want pass", name, checks[name])
			}
		}
		// No AOF, no snapshots (redistest's servers keep nothing on disk).
		if p := checks["persistence"]; p.Verdict != "warn" || !strings.Contains(p.Reason, "restart") {
			t.Errorf("persistence: %+v; want a warning saying what a restart loses", p)
		}
		if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 0 {
			t.Errorf("doctor left keys behind: %q", keys)
		}
	})

	// A user who may not SCAN leaves only what expires by itself: the keys
	// without expiry (an Election's leader, what a refused script wrote)
	// are deleted by name.
	noPermanentKeys := func(t *testing.T) {
		t.Helper()
		for _, key := range rdb.Keys(ctx, "dlock:doctor-*").Val() {
			if ttl := rdb.PTTL(ctx, key).Val(); ttl < 0 {
				t.Errorf("doctor left %s with no expiry", key)
			}
		}
	}

	// Issue 36.7: a check doctor cannot make does not pass.
	t.Run("the rights to lock, without +info", func(t *testing.T) {
		defer noPermanentKeys(t)
		code, checks := doctorReport(t, "redis://locks:pw@"+srv.Addr())
		if checks["rights"].Verdict != "pass" {
			t.Fatalf("as a user with the rights to lock: rights %+v; want pass", checks["rights"])
		}
		if m := checks["maxmemory-policy"]; code != exitFailure || m.Verdict != "fail" || !strings.Contains(m.Reason, "+info") {
			t.Errorf("maxmemory-policy without +info: exit %d, %+v; want %d and a failure naming +info", code, m, exitFailure)
		}
		// HELLO's version: Valkey's own, where INFO says redis_version:7.2.4.
		hello := helloVersion(context.Background(), srv.Client())
		if v := checks["version"]; v.Verdict != "pass" || hello == "" || !strings.Contains(v.Reason, "Redis "+hello) {
			t.Errorf("version without +info: %+v; want it read from HELLO (%q)", v, hello)
		}
	})

	t.Run("a right missing", func(t *testing.T) {
		defer noPermanentKeys(t)
		code, checks := doctorReport(t, "redis://nozadd:pw@"+srv.Addr())
		r := checks["rights"]
		if code != exitFailure || r.Verdict != "fail" || !strings.Contains(r.Reason, "NOPERM") || !strings.Contains(strings.ToLower(r.Reason), "zadd") {
			t.Fatalf("as a user without +zadd: exit %d, rights %+v; want %d and a failure naming zadd", code, r, exitFailure)
		}
	})

	t.Run("--prefix", func(t *testing.T) {
		url := "redis://myapp:pw@" + srv.Addr()
		code, checks := doctorReport(t, url)
		if r := checks["rights"]; code != exitFailure || r.Verdict != "fail" || !strings.Contains(r.Reason, "NOPERM") {
			t.Errorf("a user granted myapp:* only, checked under dlock:: exit %d, rights %+v; want %d and NOPERM", code, r, exitFailure)
		}
		code, stdout, stderr := runDlock(t, url, "doctor", "--json", "--prefix", "myapp:")
		if code != 0 || !strings.Contains(stdout, "myapp:doctor-") {
			t.Errorf("--prefix myapp:: exit %d\n%s%s", code, stdout, stderr)
		}
	})

	t.Run("appendfsync always", func(t *testing.T) {
		for _, set := range [][2]string{{"appendonly", "yes"}, {"appendfsync", "always"}} {
			if err := rdb.ConfigSet(ctx, set[0], set[1]).Err(); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { rdb.ConfigSet(ctx, "appendonly", "no") })
		code, checks := doctorReport(t, url)
		if p := checks["persistence"]; code != 0 || p.Verdict != "pass" {
			t.Errorf("appendonly yes, appendfsync always: exit %d, persistence %+v; want pass", code, p)
		}
	})

	t.Run("an evicting policy", func(t *testing.T) {
		for _, set := range [][2]string{{"maxmemory", "64mb"}, {"maxmemory-policy", "allkeys-lru"}} {
			if err := rdb.ConfigSet(ctx, set[0], set[1]).Err(); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction")
			rdb.ConfigSet(ctx, "maxmemory", "0")
		})
		code, checks := doctorReport(t, url)
		m := checks["maxmemory-policy"]
		if code != exitFailure || m.Verdict != "fail" || !strings.Contains(m.Reason, "allkeys-lru") {
			t.Fatalf("allkeys-lru: exit %d, maxmemory-policy %+v; want %d and a failure naming the policy", code, m, exitFailure)
		}
		code, stdout, _ := runDlock(t, url, "doctor")
		if code != exitFailure || !strings.Contains(stdout, "fail  maxmemory-policy") {
			t.Fatalf("the text: exit %d\n%s", code, stdout)
		}
	})

	t.Run("replicas", func(t *testing.T) {
		if err := rdb.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil { // a sync at once, not in 5 s
			t.Fatal(err)
		}
		host, port, _ := strings.Cut(srv.Addr(), ":")
		replica := redistest.Start(t, "--replicaof", host, port)
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(rdb.Info(ctx, "replication").Val(), "connected_slaves:1"); {
			if time.Now().After(deadline) {
				t.Fatal("the replica did not connect within 30 s")
			}
			time.Sleep(10 * time.Millisecond) // nothing to wait on but the master's answer
		}
		code, checks := doctorReport(t, url)
		if r := checks["replication"]; code != 0 || r.Verdict != "warn" || !strings.Contains(r.Reason, "WithReplicaAck") {
			t.Errorf("a replica, min-replicas-to-write 0: exit %d, replication %+v; want 0 and a warning naming WithReplicaAck", code, r)
		}
		if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "2").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rdb.ConfigSet(ctx, "min-replicas-to-write", "0") })
		code, checks = doctorReport(t, url)
		if r := checks["replication"]; code != exitFailure || r.Verdict != "fail" || !strings.Contains(r.Reason, "NOREPLICAS") {
			t.Errorf("min-replicas-to-write 2 with 1 replica: exit %d, replication %+v; want %d and a failure", code, r, exitFailure)
		}
		code, checks = doctorReport(t, "redis://"+replica.Addr())
		if r := checks["replication"]; code != exitFailure || r.Verdict != "fail" || !strings.Contains(r.Reason, "replica") {
			t.Errorf("doctor on the replica: exit %d, replication %+v; want %d and a failure", code, r, exitFailure)
		}
	})

	t.Run("unreachable", func(t *testing.T) {
		code, stdout, stderr := runDlock(t, "redis://127.0.0.1:1", "doctor")
		if code != exitRedis || stdout != "" || !strings.HasPrefix(stderr, "dlock doctor: cannot reach Redis") {
			t.Fatalf("exit %d, stdout %q, stderr %q; want %d and one line", code, stdout, stderr, exitRedis)
		}
		if code, _, _ := runDlock(t, "redis://locks:wrong@"+srv.Addr(), "doctor"); code != exitNoPermission {
			t.Fatalf("a wrong password: exit %d; want %d", code, exitNoPermission)
		}
	})
}

// A cluster is checked on every master: one slot no master serves fails
// the cluster check, naming the slot. (The nodes serve the other slots on,
// so that the other checks are quick: a cluster requiring full coverage
// would refuse every command, and doctor's locks would wait that out.)
func TestDoctor_ClusterWithASlotUncovered(t *testing.T) {
	cluster := redistest.StartCluster(t, append(redistest.UserArgs("locks", "pw", redistest.ClusterACL),
		"--cluster-require-full-coverage", "no")...)
	// One node's address: doctor finds the others. As the default user,
	// then as one granted what the README lists for a cluster.
	url := "redis://" + cluster.Addrs()[0]
	for _, user := range []string{"", "locks:pw@"} {
		code, checks := doctorReport(t, "redis://"+user+cluster.Addrs()[0])
		if code != 0 || checks["cluster"].Verdict != "pass" || checks["rights"].Verdict != "pass" {
			t.Fatalf("a healthy cluster, as %q: exit %d, %+v", user, code, checks)
		}
		if v := checks["version"]; v.Verdict != "pass" || !strings.Contains(v.Reason, "SPUBLISH") {
			t.Errorf("version on a Redis 7 cluster, as %q: %+v; want pass naming sharded pub/sub", user, v)
		}
	}

	const slot = 42 // node 0's
	if err := cluster.Nodes[0].Client().Do(context.Background(), "CLUSTER", "DELSLOTS", slot).Err(); err != nil {
		t.Fatal(err)
	}
	code, checks := doctorReport(t, url)
	c := checks["cluster"]
	if code != exitFailure || c.Verdict != "fail" || !strings.Contains(c.Reason, "42") {
		t.Fatalf("slot %d uncovered: exit %d, cluster %+v; want %d and a failure naming the slot", slot, code, c, exitFailure)
	}
	for name, other := range checks {
		if name != "cluster" && other.Verdict == "fail" {
			t.Errorf("%s: %+v; want only the cluster check to fail", name, other)
		}
	}
}

func TestDoctor_HelpHasExamplesAndExitCodes(t *testing.T) {
	code, stdout, _ := runDlock(t, "", "doctor", "--help")
	for _, want := range []string{"Usage: dlock doctor", "Examples:", "Exit codes:", "69", "77", "--json", "--prefix"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("doctor --help: exit %d, no %q:\n%s", code, want, stdout)
		}
	}
	for _, args := range [][]string{{"doctor", "extra"}, {"doctor", "--prefix", ""}} {
		if code, stdout, stderr := runDlock(t, "redis://127.0.0.1:1", args...); code != exitUsage || stdout != "" || !strings.Contains(stderr, "dlock doctor --help") {
			t.Errorf("dlock %q: exit %d, %q %q; want %d pointing to the help", args, code, stdout, stderr, exitUsage)
		}
	}
}

// The rights check names a missing right by trying, one by one, each
// command dlock's scripts run and each the README grants: none may be
// left out.
func TestDoctor_TriesEveryCommandTheScriptsRun(t *testing.T) {
	tried := map[string]bool{}
	for _, command := range dlockCommands {
		tried[command[0]] = true
	}
	sources, err := filepath.Glob("../../internal/scripts/*.lua")
	if err != nil || len(sources) == 0 {
		t.Fatalf("no scripts found: %v", err)
	}
	call := regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z]+)['"]`)
	for _, path := range sources {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			if !tried[strings.ToLower(m[1])] {
				t.Errorf("%s runs %s, which the rights check does not try", filepath.Base(path), m[1])
			}
		}
	}
	// What the lock and wake-up probes send themselves, named by Redis
	// when refused.
	sentDirectly := []string{"fcall", "function|load", "evalsha", "eval", "script|load", "publish", "subscribe", "unsubscribe", "ping", "hello"}
	for _, rule := range redistest.DlockACL {
		command, ok := strings.CutPrefix(rule, "+")
		if ok && !tried[command] && !slices.Contains(sentDirectly, command) {
			t.Errorf("the README grants %s, which the rights check does not try", command)
		}
	}
}

// readmeACL is the ACL the README tells operators to grant on a single
// server: the rules of its ACL SETUSER block, as written there.
func readmeACL(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "\nACL SETUSER locks on >password ")
	block, _, ok2 := strings.Cut(block, "\n```")
	if !ok || !ok2 {
		t.Fatal("the README has no ACL SETUSER block")
	}
	return strings.Fields(block)
}

// Issue 36.7: as the README's ACL user, doctor reads the eviction policy
// and fails a Redis that may evict held locks.
func TestDoctor_AsTheREADMEsACLUserSeesAnEvictingPolicy(t *testing.T) {
	srv := redistest.Start(t, append(redistest.UserArgs("locks", "pw", readmeACL(t)),
		"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")...)
	code, checks := doctorReport(t, "redis://locks:pw@"+srv.Addr())
	if m := checks["maxmemory-policy"]; code != exitFailure || m.Verdict != "fail" || !strings.Contains(m.Reason, "allkeys-lru") {
		t.Fatalf("an allkeys-lru Redis, as the README's user: exit %d, maxmemory-policy %+v; want %d and a failure naming allkeys-lru",
			code, m, exitFailure)
	}
	if r := checks["rights"]; r.Verdict != "pass" {
		t.Fatalf("the README's rights: %+v; want pass", r)
	}
}
