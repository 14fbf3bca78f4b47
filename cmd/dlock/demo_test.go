package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// runInProcess runs a subcommand in this process, with no terminal.
func runInProcess(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &output{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut})
	return code, out.String(), errOut.String()
}

func TestDemo_EmbeddedRedisGivesACleanVerdictForEveryType(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	code, stdout, stderr := runInProcess("demo", "--duration", "700ms", "--workers", "4")
	if code != 0 || !strings.Contains(stdout, "verdict: OK") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, lockType := range lockTypes {
		if !strings.Contains(stdout, "\n"+lockType+" ") {
			t.Fatalf("no verdict row for %s:\n%s", lockType, stdout)
		}
	}
}

func TestDemo_RealRedisGivesACleanVerdict(t *testing.T) {
	srv := redistest.Start(t)
	code, stdout, stderr := runInProcess("demo", "--redis", "redis://"+srv.Addr(), "--duration", "700ms")
	if code != 0 || !strings.Contains(stdout, "verdict: OK") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

func TestBench_ReportsRatesLatenciesAndCommands(t *testing.T) {
	srv := redistest.Start(t)
	for _, lockType := range lockTypes {
		code, stdout, stderr := runInProcess("bench", "--redis", "redis://"+srv.Addr(), "--type", lockType,
			"--clients", "3", "--duration", "300ms")
		measured := lockType != "Semaphore" && lockType != "MultiLock" // the others hand off to one waiter
		if code != 0 || !strings.Contains(stdout, "per acquisition") || !strings.Contains(stdout, "max/min") ||
			strings.Contains(stdout, "handoff:") != measured {
			t.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", lockType, code, stdout, stderr)
		}
	}
}

func TestCLI_UnreachableRedisFailsFast(t *testing.T) {
	// A port from a server that was started and stopped: nothing listens there.
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Kill()
	for _, args := range [][]string{
		{"demo", "--redis", "redis://" + addr},
		{"status", "--redis", "redis://" + addr, "x"},
		{"run", "--redis", "redis://" + addr, "x", "--", "true"},
	} {
		start := time.Now()
		code, _, stderr := runInProcess(args...)
		if code != exitRedis || !strings.Contains(stderr, "cannot reach Redis") {
			t.Fatalf("%v: exit %d, stderr %q; want %d and a message saying Redis cannot be reached", args, code, stderr, exitRedis)
		}
		if took := time.Since(start); took > 2*dialTimeout+time.Second {
			t.Fatalf("%v took %v to report an unreachable server", args, took)
		}
	}
	// A URL dlock cannot use is a bad argument, not an unreachable server.
	code, _, stderr := runInProcess("run", "--redis", "http://nowhere", "x", "--", "true")
	if code != exitUsage || !strings.Contains(stderr, "bad Redis URL") {
		t.Fatalf("a URL of the wrong scheme: exit %d, stderr %q", code, stderr)
	}
}

func TestCLI_EverySubcommandHasHelpWithExamples(t *testing.T) {
	for _, command := range []string{"run", "status", "unlock", "demo", "bench"} {
		code, stdout, _ := runInProcess(command, "--help")
		if code != 0 || !strings.Contains(stdout, "Examples:") || !strings.Contains(stdout, "Flags:") {
			t.Fatalf("%s --help: exit %d\n%s", command, code, stdout)
		}
	}
	if code, stdout, _ := runInProcess("version"); code != 0 || !strings.HasPrefix(stdout, "dlock ") {
		t.Fatalf("version: exit %d, %q", code, stdout)
	}
	if code, _, _ := runInProcess("frobnicate"); code != exitUsage {
		t.Fatalf("an unknown command: exit %d, want %d", code, exitUsage)
	}
	if code, _, _ := runInProcess("run", "name-without-command"); code != exitUsage {
		t.Fatalf("run without a command: exit %d, want %d", code, exitUsage)
	}
}
