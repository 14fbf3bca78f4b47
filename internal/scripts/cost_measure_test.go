//go:build measure

// A measurement, not a test: the server's instructions per uncontended
// lock+unlock of each type, counted by callgrind inside FCALL only (the
// scripts' commands and logic; not the network nor the server's cron), so
// the figure is the same on a loaded machine. A Client sends the calls, as
// in use: rights known, no holder info. The counts vary by about 0.3%
// from run to run (the allocator, the Lua collector).
//
// Run (the directory of the out file must exist):
// DLOCK_REDIS_SERVER="valgrind --tool=callgrind --toggle-collect=fcallCommand --callgrind-out-file=/tmp/cg/dlock.%p redis-server" \
// go test -tags measure -count=1 -v -run TestMeasure_InstructionsPerPair ./internal/scripts/
package scripts_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// totals is the events line callgrind writes at the end of a dump.
var (
	totals      = regexp.MustCompile(`(?m)^totals: (\d+)`)
	outFileFlag = regexp.MustCompile(`--callgrind-out-file=(\S+)`)
)

func TestMeasure_InstructionsPerPair(t *testing.T) {
	if !strings.Contains(os.Getenv(redistest.ServerEnv), "callgrind") {
		t.Skip(redistest.ServerEnv + " runs no callgrind")
	}
	const pairs = 200
	m := outFileFlag.FindStringSubmatch(os.Getenv(redistest.ServerEnv))
	if m == nil {
		t.Fatal(redistest.ServerEnv + " names no --callgrind-out-file")
	}
	outFile := m[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	types := []struct {
		name string
		lock func(context.Context) (*dlock.Lease, error)
	}{
		{"Mutex", c.Mutex("m").Lock},
		{"FairMutex", c.FairMutex("f").Lock},
		{"Semaphore", c.Semaphore("s", 4).Acquire},
		{"MultiLock of 3", c.MultiLock([]string{"a", "b", "c"}).Lock},
		{"Election", func(ctx context.Context) (*dlock.Lease, error) { return c.Election("e").Campaign(ctx, "me") }},
		{"RWMutex read", c.RWMutex("rw").RLock},
		{"RWMutex write", c.RWMutex("rw").Lock},
		{"ReentrantMutex", c.ReentrantMutex("r").Lock},
	}
	// control runs callgrind_control's command on the server; a dump's
	// totals.
	control := func(flag string) int64 {
		out, err := exec.Command("callgrind_control", flag, strconv.Itoa(srv.Pid())).CombinedOutput()
		if err != nil {
			t.Fatalf("callgrind_control %s: %v: %s", flag, err, out)
		}
		if flag != "-d" {
			return 0
		}
		dumps, _ := filepath.Glob(strings.ReplaceAll(outFile, "%p", strconv.Itoa(srv.Pid())) + ".*")
		latest, latestTime := "", time.Time{}
		for _, d := range dumps {
			if fi, err := os.Stat(d); err == nil && fi.ModTime().After(latestTime) {
				latest, latestTime = d, fi.ModTime()
			}
		}
		data, err := os.ReadFile(latest)
		if err != nil {
			t.Fatal(err)
		}
		m := totals.FindSubmatch(data)
		if m == nil {
			t.Fatalf("no totals in %s", latest)
		}
		n, _ := strconv.ParseInt(string(m[1]), 10, 64)
		return n
	}
	only := os.Getenv("DLOCK_MEASURE_ONLY") // a type's name: measure it alone
	for _, typ := range types {
		if only != "" && typ.name != only {
			continue
		}
		pair := func() {
			lease, err := typ.lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		pair() // the library loaded, the rights seen
		control("-z")
		for range pairs {
			pair()
		}
		t.Logf("%-15s %8d instructions per lock+unlock", typ.name, control("-d")/pairs)
	}
}
