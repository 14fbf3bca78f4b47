package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
)

// scriptsRun counts the scripts a server has run: the demo and the bench
// take every lock through one.
func scriptsRun(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	info, err := srv.Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_fcall:", "cmdstat_eval:", "cmdstat_evalsha:", "cmdstat_evalsha_ro:", "cmdstat_eval_ro:"} {
			if stats, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
				for _, c := range calls {
					n = n*10 + int64(c-'0')
				}
			}
		}
	}
	return n
}

// REDIS_URL, set for dlock run in an operator's shell, must not send the
// demo or the bench to that Redis: only --redis does.
func TestDemoAndBench_RunOnTheEmbeddedRedisUnlessGivenRedis(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	for _, args := range [][]string{
		{"demo", "--duration", "200ms", "--workers", "2"},
		{"bench", "--duration", "200ms", "--clients", "2"},
	} {
		code, stdout, stderr := runDlock(t, url, args...) // REDIS_URL=url
		if code != 0 || !strings.Contains(stdout, "embedded Redis") {
			t.Errorf("dlock %v with REDIS_URL set: exit %d, want 0 on the embedded Redis\n%s%s", args, code, stdout, stderr)
		}
		if n := scriptsRun(t, srv); n != 0 {
			t.Errorf("dlock %v with REDIS_URL set ran %d scripts on that Redis", args, n)
		}
	}
	code, stdout, _ := runDlock(t, "", "--redis", url, "bench", "--duration", "200ms", "--clients", "2")
	if code != 0 || !strings.Contains(stdout, srv.Addr()) || scriptsRun(t, srv) == 0 {
		t.Errorf("dlock --redis URL bench: exit %d, want it run on %s\n%s", code, srv.Addr(), stdout)
	}
	for _, command := range []string{"demo", "bench"} {
		if _, help, _ := runDlock(t, "", command, "--help"); !strings.Contains(help, "REDIS_URL is not enough") {
			t.Errorf("%s --help does not say that REDIS_URL is not enough:\n%s", command, help)
		}
	}
}

// The demo and the bench write under a prefix of their own and delete what
// they wrote, so that a server of the user's is left as they found it.
func TestDemoAndBench_LeaveNoKeysBehind(t *testing.T) {
	srv := redistest.Start(t)
	url, rdb, ctx := "redis://"+srv.Addr(), srv.Client(), context.Background()
	runs := [][]string{{"demo", "--redis", url, "--duration", "200ms", "--workers", "3"}}
	for _, lockType := range lockTypes {
		runs = append(runs, []string{"bench", "--redis", url, "--type", lockType, "--duration", "200ms", "--clients", "3"})
	}
	for _, args := range runs {
		if code, stdout, stderr := runDlock(t, "", args...); code != 0 {
			t.Fatalf("dlock %v: exit %d\n%s%s", args, code, stdout, stderr)
		}
		if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 0 {
			t.Fatalf("dlock %v left %d keys: %v…", args, len(keys), keys[:min(len(keys), 5)])
		}
	}
}

// On a cluster, every master's keys are found and deleted.
func TestBench_OnAClusterLeavesNoKeysBehind(t *testing.T) {
	cluster := redistest.StartCluster(t)
	url, ctx := "redis://"+strings.Join(cluster.Addrs(), ",redis://"), context.Background()
	for _, lockType := range []string{"MultiLock", "RWMutex"} {
		args := []string{"bench", "--redis", url, "--type", lockType, "--duration", "300ms", "--clients", "3"}
		if code, stdout, stderr := runDlock(t, "", args...); code != 0 {
			t.Fatalf("dlock %v: exit %d\n%s%s", args, code, stdout, stderr)
		}
		err := cluster.Client().ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			if keys := node.Keys(ctx, "*").Val(); len(keys) != 0 {
				t.Errorf("bench --type %s left %d keys on %s: %v…", lockType, len(keys), node, keys[:min(len(keys), 5)])
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Interrupted, they still delete what they wrote, and exit 128+N.
func TestDemoAndBench_InterruptedLeaveNoKeysBehind(t *testing.T) {
	srv := redistest.Start(t)
	url, rdb, ctx := "redis://"+srv.Addr(), srv.Client(), context.Background()
	for _, args := range [][]string{
		{"demo", "--redis", url, "--duration", "1m"},
		{"bench", "--redis", url, "--type", "RWMutex", "--duration", "1m"},
	} {
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
			p := startDlock(t, "", "", args...)
			waitFor(t, 15*time.Second, "the workers write keys", func() bool { return rdb.DBSize(ctx).Val() > 0 })
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t, 30*time.Second); code != 128+int(sig) {
				t.Errorf("dlock %v, %v: exit %d, want %d\n%s", args[0], sig, code, 128+int(sig), &p.stderr)
			}
			if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 0 {
				t.Fatalf("dlock %v, %v: left %d keys: %v…", args[0], sig, len(keys), keys[:min(len(keys), 5)])
			}
		}
	}
}
