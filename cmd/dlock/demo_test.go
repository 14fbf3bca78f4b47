package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

func TestDemo_EmbeddedRedisGivesACleanVerdict(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"demo", "--duration", "1s", "--workers", "4"}, &stdout, &stderr)
	if code != 0 || !strings.Contains(stdout.String(), "verdict: OK") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
}

func TestDemo_RealRedisGivesACleanVerdict(t *testing.T) {
	srv := redistest.Start(t)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"demo", "--redis", "redis://" + srv.Addr(), "--duration", "1s"}, &stdout, &stderr)
	if code != 0 || !strings.Contains(stdout.String(), "verdict: OK") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
}

func TestDemo_UnreachableRedisFailsFast(t *testing.T) {
	var stdout, stderr bytes.Buffer
	start := time.Now()
	// A port from a server that was started and stopped: nothing listens there.
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Kill()
	code := run(context.Background(), []string{"demo", "--redis", "redis://" + addr}, &stdout, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), "cannot reach Redis") {
		t.Fatalf("exit %d, stderr %q; want a failure saying Redis cannot be reached", code, &stderr)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("took %v to report an unreachable server", took)
	}
}

func TestRun_UnknownCommandIsAUsageError(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"frobnicate"}, &stdout, &stderr); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
}
