package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/redistest"
)

// logRecorder is a slog handler that keeps every record.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}

func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// byNode counts the records of level about each node (their "node" attribute).
func (h *logRecorder) byNode(level slog.Level) map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	counts := map[string]int{}
	for _, r := range h.records {
		if r.Level != level {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "node" {
				counts[a.Value.String()]++
			}
			return true
		})
	}
	return counts
}

// warnings counts the warnings logged about the lock called name.
func (h *logRecorder) warnings(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.records {
		r.Attrs(func(a slog.Attr) bool {
			if r.Level == slog.LevelWarn && a.Key == "lock" && a.Value.String() == name {
				n++
			}
			return true
		})
	}
	return n
}

// lockMany takes and releases n locks of different names, so that a
// cluster's every master sees some, each lock a first use for none but the
// first.
func lockMany(t *testing.T, ctx context.Context, c *dlock.Client, n int) {
	t.Helper()
	for range n {
		lease, err := c.Mutex(lockName(t)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// lockThroughRounds takes locks, lets the Client's own node check run, then
// makes it look again and takes more: however many locks, a node is logged
// about once.
func lockThroughRounds(t *testing.T, ctx context.Context, c *dlock.Client) {
	t.Helper()
	lockMany(t, ctx, c, 20)
	dlock.WaitNodeCheck(c)
	dlock.NodeCheckDue(c)
	lockMany(t, ctx, c, 20)
	dlock.WaitNodeCheck(c)
}

var evictingPolicies = []string{"allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"}

func TestCheck_APolicyThatCanEvictLocksIsReportedAndLoggedOncePerNode(t *testing.T) {
	t.Parallel()
	for _, policy := range append([]string{"noeviction"}, evictingPolicies...) {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", policy)
			ctx := ctxFor(t, time.Minute)
			logs := &logRecorder{}
			c := newClient(t, srv.Client(), dlock.WithLogger(slog.New(logs)))
			lockThroughRounds(t, ctx, c)

			report, err := c.Check(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(report.Nodes) != 1 || report.Nodes[0].Addr != srv.Addr() {
				t.Fatalf("report %+v; want one node, %s", report, srv.Addr())
			}
			problems, logged := report.Nodes[0].Problems, logs.byNode(slog.LevelError)[srv.Addr()]
			if policy == "noeviction" {
				if len(problems) != 0 || report.Worst() != 0 || logged != 0 {
					t.Fatalf("noeviction: problems %+v, %d error lines; want none", problems, logged)
				}
				return
			}
			if len(problems) != 1 || problems[0].Check != admin.CheckMaxmemoryPolicy ||
				problems[0].Severity != admin.SeverityError || !strings.Contains(problems[0].Reason, policy) {
				t.Fatalf("%s: problems %+v; want one maxmemory-policy error naming the policy", policy, problems)
			}
			if report.Worst() != admin.SeverityError {
				t.Fatalf("worst %v; want error", report.Worst())
			}
			if logged != 1 {
				t.Fatalf("%s: %d error lines about the node after 40 locks and two rounds; want exactly 1", policy, logged)
			}
		})
	}
}

func TestCheck_EveryMasterOfAClusterIsReported(t *testing.T) {
	t.Run("noeviction", func(t *testing.T) {
		ctx := ctxFor(t, time.Minute)
		logs := &logRecorder{}
		c := newClient(t, backends[1].newRedis(t), dlock.WithLogger(slog.New(logs)))
		lockThroughRounds(t, ctx, c)
		report, err := c.Check(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(report.Nodes) != 3 || report.Worst() != 0 || len(logs.byNode(slog.LevelError)) != 0 {
			t.Fatalf("report %+v, error lines %v; want 3 masters, no problem", report, logs.byNode(slog.LevelError))
		}
	})
	t.Run("volatile-lru", func(t *testing.T) {
		cluster := redistest.StartCluster(t, "--maxmemory", "4mb", "--maxmemory-policy", "volatile-lru")
		ctx := ctxFor(t, time.Minute)
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
		t.Cleanup(func() { _ = rdb.Close() })
		logs := &logRecorder{}
		c := newClient(t, rdb, dlock.WithLogger(slog.New(logs)))
		lockThroughRounds(t, ctx, c)

		report, err := c.Check(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var addrs []string
		for _, n := range report.Nodes {
			addrs = append(addrs, n.Addr)
			if len(n.Problems) != 1 || n.Problems[0].Check != admin.CheckMaxmemoryPolicy || n.Problems[0].Severity != admin.SeverityError {
				t.Errorf("%s: problems %+v; want one maxmemory-policy error", n.Addr, n.Problems)
			}
		}
		want := slices.Clone(cluster.Addrs())
		slices.Sort(want)
		if !slices.Equal(addrs, want) {
			t.Fatalf("nodes reported %v; want every master %v", addrs, want)
		}
		logged := logs.byNode(slog.LevelError)
		for _, addr := range want {
			if logged[addr] != 1 {
				t.Errorf("%s: %d error lines; want exactly 1", addr, logged[addr])
			}
		}
		if len(logged) != len(want) {
			t.Errorf("error lines by node %v; want one for each master", logged)
		}
	})
}

func TestCheck_INFORefusedIsAProblemNotAFailureAndLockingGoesOn(t *testing.T) {
	srv := startServer(t)
	ctx := ctxFor(t, time.Minute)
	logs := &logRecorder{}
	c := newClient(t, aclUser(t, ctx, srv.Client(), "locks", dlockACL...), dlock.WithLogger(slog.New(logs)))
	lockThroughRounds(t, ctx, c)

	report, err := c.Check(ctx)
	if err != nil {
		t.Fatalf("Check as a user without +info: %v; want a report", err)
	}
	if len(report.Nodes) != 1 {
		t.Fatalf("report %+v; want one node", report)
	}
	problems := report.Nodes[0].Problems
	if len(problems) != 1 || problems[0].Check != admin.CheckInfo || problems[0].Severity != admin.SeverityWarning ||
		!strings.Contains(problems[0].Reason, "cannot read INFO") || !strings.Contains(problems[0].Reason, "NOPERM") {
		t.Fatalf("problems %+v; want one info warning saying INFO was refused", problems)
	}
	if warned, failed := logs.byNode(slog.LevelWarn)[srv.Addr()], logs.byNode(slog.LevelError); warned != 1 || len(failed) != 0 {
		t.Fatalf("%d warnings about the node, errors %v; want one warning, no error", warned, failed)
	}
}

func TestCheck_CloseEndsTheClientsOwnCheck(t *testing.T) {
	srv := startServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	srv.Pause() // the check's INFO goes unanswered
	t.Cleanup(srv.Resume)
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, _ = c.Mutex(lockName(t)).TryLock(short) // the first use starts the check
	closed := make(chan struct{})
	go func() {
		_ = c.Close()
		close(closed)
	}()
	waitDone(t, closed, time.Minute, "Close with a check under way")
	if dlock.NodeCheckRunning(c) {
		t.Fatal("the node check runs on after Close")
	}
	if _, err := c.Check(ctxFor(t, time.Second)); !errors.Is(err, dlock.ErrClosed) {
		t.Fatal("Check on a closed Client succeeded")
	}
}

func TestCheck_BadInput(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	for _, rdb := range []redis.UniversalClient{nil, (*redis.Client)(nil), (*redis.ClusterClient)(nil), (*redis.Ring)(nil),
		&redis.Client{}, &redis.ClusterClient{}, &redis.Ring{}} {
		if _, err := dlock.New(rdb); !errors.Is(err, dlock.ErrInvalid) {
			t.Fatalf("New(%#v): %v; want ErrInvalid", rdb, err)
		}
	}
	if _, err := (*dlock.Client)(nil).Check(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatal("Check of a nil Client succeeded")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := newClient(t, backends[0].newRedis(t)).Check(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatal("Check with a cancelled context succeeded")
	}
}

func TestCheck_ARedlockReportsEachNode(t *testing.T) {
	servers := []*redistest.Server{
		redistest.Start(t),
		redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"),
		redistest.Start(t, redistest.UserArgs("locks", "secret-locks", redistest.DlockACL)...), // no +info
	}
	ctx := ctxFor(t, time.Minute)
	clients := []redis.UniversalClient{servers[0].Client(), servers[1].Client(),
		redis.NewClient(&redis.Options{Addr: servers[2].Addr(), Username: "locks", Password: "secret-locks"})}
	t.Cleanup(func() { _ = clients[2].Close() })
	report, err := mustRedlock(t, clients).Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, n := range report.Nodes {
		if n.Addr != servers[i].Addr() {
			t.Errorf("node %d reported as %s; want %s", i, n.Addr, servers[i].Addr())
		}
		for _, p := range n.Problems {
			got = append(got, fmt.Sprintf("%d %s %s", i, p.Check, p.Severity))
		}
	}
	want := []string{"1 maxmemory-policy error", "2 info warning"}
	if !slices.Equal(got, want) || report.Worst() != admin.SeverityError {
		t.Fatalf("problems %q, worst %v; want %q, error", got, report.Worst(), want)
	}
	if _, err := (&dlock.Redlock{}).Check(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("Check of a Redlock not made by NewRedlock: %v; want ErrInvalid", err)
	}
}

// Without WithLogger, an evicting policy still reaches the program: at
// error level, through slog.Default(); nothing below error level does.
func TestCheck_AnEvictingPolicyReachesSlogDefaultWithoutALogger(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")
	ctx := ctxFor(t, time.Minute)
	logs := &logRecorder{}
	before := slog.Default()
	slog.SetDefault(slog.New(logs))
	t.Cleanup(func() { slog.SetDefault(before) })
	c := newClient(t, srv.Client())
	lockThroughRounds(t, ctx, c)
	if logged := logs.byNode(slog.LevelError)[srv.Addr()]; logged != 1 {
		t.Fatalf("%d error lines about the node in slog.Default(); want 1", logged)
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for _, r := range logs.records {
		if r.Level < slog.LevelError {
			t.Errorf("logged to slog.Default() below error level: %s %q", r.Level, r.Message)
		}
	}
}
