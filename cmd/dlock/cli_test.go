package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/redistest"
)

// These tests build the dlock binary and drive it as a shell would, against
// a real redis-server.

var dlockBin string

func TestMain(m *testing.M) {
	if path := os.Getenv(mainThreadExitsEnv); path != "" {
		mainThreadExits(path)
	}
	dir, err := os.MkdirTemp("", "dlock-cli-test")
	if err != nil {
		panic(err)
	}
	dlockBin = filepath.Join(dir, "dlock")
	if out, err := exec.Command("go", "build", "-o", dlockBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building dlock: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// dlockProcess is one run of the binary.
type dlockProcess struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	exited         chan int // the exit code
}

func startDlock(t *testing.T, redisURL, stdin string, args ...string) *dlockProcess {
	t.Helper()
	return startProcess(t, exec.Command(dlockBin, args...), redisURL, stdin)
}

// startProcess starts cmd, a run of dlock (maybe through another program),
// with REDIS_URL set and stdin as its input; a test's end kills it.
func startProcess(t *testing.T, cmd *exec.Cmd, redisURL, stdin string) *dlockProcess {
	t.Helper()
	p := &dlockProcess{cmd: cmd, exited: make(chan int, 1)}
	p.cmd.Env = append(os.Environ(), "REDIS_URL="+redisURL)
	p.cmd.Stdin = strings.NewReader(stdin)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	go func() {
		_ = p.cmd.Wait()
		p.exited <- p.cmd.ProcessState.ExitCode()
	}()
	return p
}

// forceUnlock removes the lock name as an operator would, the way the
// tests take a lock from under a running dlock.
func forceUnlock(t *testing.T, url, name string) {
	t.Helper()
	if code, stdout, stderr := runDlock(t, url, "unlock", "--force", "--yes", name); code != 0 {
		t.Fatalf("unlock: exit %d, %q %q", code, stdout, stderr)
	}
}

// wait returns the exit code, failing the test if it takes past guard.
func (p *dlockProcess) wait(t *testing.T, guard time.Duration) int {
	t.Helper()
	select {
	case code := <-p.exited:
		return code
	case <-time.After(guard):
		// Killed and reaped first, so that its stderr is no longer written.
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Fatalf("dlock %v still running after %v\nstderr: %s", p.cmd.Args[1:], guard, &p.stderr)
		return -1
	}
}

func runDlock(t *testing.T, redisURL string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := startDlock(t, redisURL, "", args...)
	code = p.wait(t, 30*time.Second)
	return code, p.stdout.String(), p.stderr.String()
}

// fifo makes a named pipe: a command writing to it blocks until the test
// reads, which is how the test learns the command is running.
func fifo(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// readFifo waits for what is written to a fifo, failing the test after guard.
func readFifo(t *testing.T, path string, guard time.Duration) string {
	t.Helper()
	type result struct {
		data []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		data, err := os.ReadFile(path)
		got <- result{data, err}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return strings.TrimSpace(string(r.data))
	case <-time.After(guard):
		t.Fatalf("nothing written to %s within %v", path, guard)
		return ""
	}
}

func testRedis(t *testing.T) (url string, locks *dlock.Client) {
	srv := redistest.Start(t)
	c, err := dlock.New(srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return "redis://" + srv.Addr(), c
}

func TestRun_TwoRunsOnOneNameNeverOverlap(t *testing.T) {
	url, _ := testRedis(t)
	log := filepath.Join(t.TempDir(), "log")
	script := `echo "start $$ $(date +%s%N)" >> "$1"; sleep 0.2; echo "end $$ $(date +%s%N)" >> "$1"`
	var runs []*dlockProcess
	for range 3 {
		runs = append(runs, startDlock(t, url, "", "run", "cron-job", "--", "sh", "-c", script, "sh", log))
	}
	for _, p := range runs {
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("exit %d: %s", code, &p.stderr)
		}
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var entries [][]string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		entries = append(entries, strings.Fields(l))
	}
	if len(entries) != 6 {
		t.Fatalf("log has %d lines, want 6:\n%s", len(entries), data)
	}
	for i := 0; i < len(entries); i += 2 {
		start, end := entries[i], entries[i+1]
		if start[0] != "start" || end[0] != "end" || start[1] != end[1] {
			t.Fatalf("runs overlapped:\n%s", data)
		}
	}
}

func TestRun_PassesTheExitCodeAndTheLockInTheEnvironment(t *testing.T) {
	url, _ := testRedis(t)
	code, stdout, stderr := runDlock(t, url, "run", "--ttl", "5s", "job", "--", "sh", "-c", `echo "$DLOCK_NAME $DLOCK_TOKEN"; exit 7`)
	name, first, _ := strings.Cut(strings.TrimSpace(stdout), " ")
	firstToken, err := strconv.ParseUint(first, 10, 64)
	if code != 7 || name != "job" || err != nil {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 7 and \"job TOKEN\"", code, stdout, stderr)
	}
	code, stdout, _ = runDlock(t, url, "run", "job", "--", "sh", "-c", `echo "$DLOCK_TOKEN"`)
	if second, err := strconv.ParseUint(strings.TrimSpace(stdout), 10, 64); code != 0 || err != nil || second <= firstToken {
		t.Fatalf("second run: exit %d, token %q; want 0 and a token above %d", code, stdout, firstToken)
	}
	if code, _, _ := runDlock(t, url, "run", "job", "--", "/nonexistent/command"); code != exitNotFound {
		t.Fatalf("a command that does not exist: exit %d, want %d", code, exitNotFound)
	}
	if code, _, _ := runDlock(t, url, "run", "job", "--", "sh", "-c", "kill -KILL $$"); code != 128+9 {
		t.Fatalf("a command killed by SIGKILL: exit %d, want %d", code, 128+9)
	}
}

func TestRun_WaitZeroFailsFastWhenHeld(t *testing.T) {
	url, locks := testRedis(t)
	held, err := locks.RWMutex("busy").Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(context.Background())
	start := time.Now()
	code, _, stderr := runDlock(t, url, "run", "--wait", "0", "busy", "--", "true")
	if code != exitNotAcquired || !strings.Contains(stderr, "not acquired") {
		t.Fatalf("exit %d, stderr %q; want %d", code, stderr, exitNotAcquired)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("--wait 0 took %v", took)
	}
	code, _, _ = runDlock(t, url, "run", "--wait", "300ms", "busy", "--", "true")
	if code != exitNotAcquired {
		t.Fatalf("--wait 300ms: exit %d, want %d", code, exitNotAcquired)
	}
}

func TestRun_LostLockStopsTheCommand(t *testing.T) {
	url, _ := testRedis(t)
	ready := fifo(t, "ready")
	// The command ignores nothing: SIGTERM stops it. A grandchild keeps
	// running unless the whole process group is stopped.
	p := startDlock(t, url, "", "run", "--ttl", "1s", "--kill-grace", "2s", "deploy", "--",
		"sh", "-c", `sleep 60 & echo $! > "$1"; wait`, "sh", ready)
	grandchild, err := strconv.Atoi(readFifo(t, ready, 15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runDlock(t, url, "unlock", "--force", "--yes", "deploy"); code != 0 || !strings.Contains(stdout, "removed") {
		t.Fatalf("unlock: exit %d, %q %q", code, stdout, stderr)
	}
	if code := p.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d\nstderr: %s", code, exitLost, &p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "lost the lock") {
		t.Fatalf("stderr does not say the lock was lost: %s", &p.stderr)
	}
	// Killed with its group, it is gone once its new parent has reaped it.
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(grandchild, 0) == nil; {
		if time.Now().After(deadline) {
			t.Fatalf("the command's child %d still runs after the lock was lost", grandchild)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRun_ForwardsSIGTERMToTheCommandAndReleases(t *testing.T) {
	url, locks := testRedis(t)
	ready := fifo(t, "ready")
	p := startDlock(t, url, "", "run", "job", "--",
		"sh", "-c", `trap "exit 42" TERM; echo ready > "$1"; while :; do sleep 0.05; done`, "sh", ready)
	readFifo(t, ready, 15*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 15*time.Second); code != 42 {
		t.Fatalf("exit %d, want the command's 42\nstderr: %s", code, &p.stderr)
	}
	info, err := locks.Describe(context.Background(), "job")
	if err != nil || len(info.Holders) != 0 {
		t.Fatalf("after the run: %+v, %v; want the lock released", info, err)
	}
}

func TestRun_SharedRunsOverlapButNotWithAnExclusiveOne(t *testing.T) {
	url, _ := testRedis(t)
	first, second, finish := fifo(t, "first"), fifo(t, "second"), fifo(t, "finish")
	a := startDlock(t, url, "", "run", "--shared", "dataset", "--", "sh", "-c", `echo a > "$1"; cat "$2"`, "sh", first, finish)
	readFifo(t, first, 15*time.Second)
	b := startDlock(t, url, "", "run", "--shared", "dataset", "--", "sh", "-c", `echo b > "$1"`, "sh", second)
	readFifo(t, second, 15*time.Second) // b ran while a holds its shared lock
	if code := b.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("second shared run: exit %d: %s", code, &b.stderr)
	}
	if code, _, _ := runDlock(t, url, "run", "--wait", "0", "dataset", "--", "true"); code != exitNotAcquired {
		t.Fatalf("an exclusive run during a shared one: exit %d, want %d", code, exitNotAcquired)
	}
	if err := os.WriteFile(finish, []byte("done\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("first shared run: exit %d: %s", code, &a.stderr)
	}
}

func TestStatus_JSONDescribesTheLock(t *testing.T) {
	url, locks := testRedis(t)
	ctx := context.Background()
	code, stdout, _ := runDlock(t, url, "status", "--json", "reports")
	var free statusJSON
	if err := json.Unmarshal([]byte(stdout), &free); code != 0 || err != nil || free.State != "free" || free.Type != "" || free.Held {
		t.Fatalf("a free lock: exit %d, %v, %+v", code, err, free)
	}
	lease, err := locks.RWMutex("reports", dlock.WithOwner("host-a/pid-7")).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, _ = runDlock(t, url, "status", "--json", "reports")
	var held statusJSON
	if err := json.Unmarshal([]byte(stdout), &held); code != 0 || err != nil {
		t.Fatalf("exit %d, %v:\n%s", code, err, stdout)
	}
	if held.Type != "RWMutex" || !held.Held || len(held.Holders) != 1 || held.Holders[0] != (holderJSON{Owner: admin.OwnerHash("host-a/pid-7"), Mode: "write", Holds: 1}) ||
		held.TTLMillis <= 0 || held.LastToken != lease.Token() {
		t.Fatalf("a held lock: %+v", held)
	}
	code, stdout, _ = runDlock(t, url, "status", "reports")
	if code != 0 || !strings.Contains(stdout, admin.OwnerHash("host-a/pid-7")+"  write ×1") || strings.Contains(stdout, "host-a/pid-7") {
		t.Fatalf("text status: exit %d\n%s", code, stdout)
	}

	for range 2 {
		if _, err := locks.Semaphore("workers", 5).Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, _ = runDlock(t, url, "status", "--json", "workers")
	var sem statusJSON
	if err := json.Unmarshal([]byte(stdout), &sem); code != 0 || err != nil {
		t.Fatalf("exit %d, %v:\n%s", code, err, stdout)
	}
	if sem.Type != "Semaphore" || sem.Permits != 5 || len(sem.Holders) != 1 || sem.Holders[0] != (holderJSON{Mode: "permit", Holds: 2}) {
		t.Fatalf("a semaphore with 2 of 5 permits held: %+v", sem)
	}
}

func TestUnlock_AsksBeforeRemoving(t *testing.T) {
	url, locks := testRedis(t)
	if _, err := locks.RWMutex("deploy").Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := startDlock(t, url, "n\n", "unlock", "--force", "deploy")
	if code := p.wait(t, 15*time.Second); code != exitFailure {
		t.Fatalf("answered no: exit %d, want %d", code, exitFailure)
	}
	if info, _ := locks.Describe(context.Background(), "deploy"); len(info.Holders) != 1 {
		t.Fatal("removed although the answer was no")
	}
	p = startDlock(t, url, "y\n", "unlock", "--force", "deploy")
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("answered yes: exit %d: %s", code, &p.stderr)
	}
	if info, _ := locks.Describe(context.Background(), "deploy"); len(info.Holders) != 0 {
		t.Fatal("not removed although the answer was yes")
	}
	if code, _, _ := runDlock(t, url, "unlock", "deploy"); code != exitUsage {
		t.Fatalf("unlock without --force: exit %d, want %d", code, exitUsage)
	}
}

// A name whose key holds what dlock did not write is no lock: status, unlock
// --force and run each say so, naming the key, exit 1 and leave it as it
// was.
func TestCLI_LeavesAKeyDlockDidNotWrite(t *testing.T) {
	srv := redistest.Start(t)
	url, rdb, ctx := "redis://"+srv.Addr(), srv.Client(), context.Background()
	rdb.Set(ctx, "dlock:{precious}", "my-precious-data", 0)
	rdb.HSet(ctx, "dlock:{fh2}", "foo", "bar")
	before := map[string]string{}
	for _, key := range []string{"dlock:{precious}", "dlock:{fh2}"} {
		before[key] = rdb.Dump(ctx, key).Val()
	}
	for _, args := range [][]string{
		{"status", "precious"},
		{"status", "--json", "precious"},
		{"unlock", "--force", "--yes", "precious"},
		{"run", "precious", "--", "true"},
		{"status", "fh2"},
		{"unlock", "--force", "--yes", "fh2"},
		{"run", "fh2", "--", "true"},
		{"run", "--shared", "fh2", "--", "true"},
	} {
		key := "dlock:{" + args[len(args)-1] + "}"
		if args[0] == "run" {
			key = "dlock:{" + args[len(args)-3] + "}"
		}
		code, stdout, stderr := runDlock(t, url, args...)
		if code != exitFailure || !strings.Contains(stderr, key) || strings.Contains(stderr, ": dlock: ") {
			t.Errorf("dlock %v: exit %d, stdout %q, stderr %q; want exit %d naming %s, saying dlock once", args, code, stdout, stderr, exitFailure, key)
		}
		for key, dump := range before {
			if rdb.Dump(ctx, key).Val() != dump {
				t.Fatalf("dlock %v changed %s", args, key)
			}
		}
	}
	if n := len(rdb.Keys(ctx, "*").Val()); n != len(before) {
		t.Fatalf("%d keys after, want the %d there were: %v", n, len(before), rdb.Keys(ctx, "*").Val())
	}
}

func TestRun_OnAClusterGivenAllNodesOrOne(t *testing.T) {
	cluster := redistest.StartCluster(t)
	var urls []string
	for _, addr := range cluster.Addrs() {
		urls = append(urls, "redis://"+addr)
	}
	for what, url := range map[string]string{"every node": strings.Join(urls, ","), "one node": urls[0]} {
		for i := range 3 { // names in different slots
			name := fmt.Sprintf("cluster-job-%d", i)
			code, stdout, stderr := runDlock(t, url, "run", name, "--", "sh", "-c", `echo "$DLOCK_TOKEN"`)
			if code != 0 || stdout == "" {
				t.Fatalf("%s, %s: exit %d, %q, %q", what, name, code, stdout, stderr)
			}
			if code, stdout, _ := runDlock(t, url, "status", "--json", name); code != 0 || !strings.Contains(stdout, `"state": "free"`) {
				t.Fatalf("%s, %s: status after the run: exit %d\n%s", what, name, code, stdout)
			}
		}
	}
}

// rediss:// URLs: the CLI speaks TLS with the system's trust store (here
// the test's CA, through SSL_CERT_FILE) and a password from the URL.
func TestCLI_RedissURL(t *testing.T) {
	srv, certs := redistest.StartTLS(t)
	t.Setenv("SSL_CERT_FILE", certs.CAFile)
	url := "rediss://:" + certs.Password + "@" + srv.Addr()
	if code, stdout, stderr := runDlock(t, url, "run", "tls-job", "--", "true"); code != 0 {
		t.Fatalf("run over TLS: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, _ := runDlock(t, url, "status", "--json", "tls-job"); code != 0 || !strings.Contains(stdout, `"state": "free"`) {
		t.Fatalf("status over TLS: exit %d\n%s", code, stdout)
	}
	wrong := "rediss://:wrong@" + srv.Addr()
	if code, _, stderr := runDlock(t, wrong, "status", "tls-job"); code != exitNoPermission || !strings.Contains(stderr, "WRONGPASS") {
		t.Fatalf("a wrong password: exit %d, want %d\n%s", code, exitNoPermission, stderr)
	}
}
