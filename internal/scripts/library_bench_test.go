package scripts

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/serverstats"
)

// The server's time per call of a Mutex's acquire, extend and release,
// sent as EVALSHA and as FCALL in turn on one server, so that both see the
// same load: server-µs/evalsha and server-µs/fcall (INFO commandstats).
//
//	nice go test -run '^$' -bench ServerTime -benchtime 20000x ./internal/scripts/
func BenchmarkLibrary_ServerTimePerCall(b *testing.B) {
	rdb := redistest.Start(b).Client()
	ctx := context.Background()
	if err := rdb.FunctionLoadReplace(ctx, Library).Err(); err != nil {
		b.Fatal(err)
	}
	calls := []struct {
		s    *redis.Script
		keys []string
		args []any
	}{
		{MutexAcquire, []string{lockKey, fenceKey, "t:{m}:void:x", waitersKey, "t:{m}:holder"}, []any{tok("a"), 30000, "", 3000, "", ""}},
		{MutexExtend, []string{lockKey, "t:{m}:forced", "t:{m}:holder"}, []any{tok("a"), 30000, 1, ""}},
		{MutexRelease, []string{lockKey, channel, waitersKey, fenceKey, "t:{m}:holder", "t:{m}:released:x"}, []any{tok("a"), "PUBLISH", 5000, 5000, 0, ""}},
	}
	for _, c := range calls {
		if err := c.s.Load(ctx, rdb).Err(); err != nil {
			b.Fatal(err)
		}
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		for _, c := range calls {
			if err := rdb.EvalSha(ctx, c.s.Hash(), c.keys, c.args...).Err(); err != nil {
				b.Fatal(err)
			}
			if err := rdb.FCall(ctx, Function(c.s), c.keys, c.args...).Err(); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, cmd := range []string{"evalsha", "fcall"} {
		usec, err := serverstats.CommandStat(ctx, rdb, cmd, "usec_per_call")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(usec, "server-µs/"+cmd)
	}
}

// The server's time per uncontended lock+unlock of an RWMutex (read and
// write; a write as the README's ACL user) and a ReentrantMutex, each an
// acquire and a release by FCALL, the rights known: server-µs/pair (INFO
// commandstats, read around each pair). With
// DLOCK_BENCH_BEFORE naming a file an earlier dlock wrote (run this
// benchmark there with DLOCK_BENCH_DUMP), its library's scripts run in
// turn with these, on the same server: server-µs/pair-before.
//
//	git archive REV | tar -x -C /tmp/old
//	cp internal/scripts/library_bench_test.go /tmp/old/internal/scripts/
//	(cd /tmp/old && DLOCK_BENCH_DUMP=/tmp/old.json go test -run '^$' -bench RWServerTime -benchtime 1x ./internal/scripts/)
//	DLOCK_BENCH_BEFORE=/tmp/old.json go test -run '^$' -bench RWServerTime -benchtime 5000x ./internal/scripts/
func BenchmarkLibrary_RWServerTimePerPair(b *testing.B) {
	type library struct{ Source, Acquire, Release string }
	now := library{Library, Function(RWAcquire), Function(RWRelease)}
	if path := os.Getenv("DLOCK_BENCH_DUMP"); path != "" {
		out, err := json.Marshal(now)
		if err == nil {
			err = os.WriteFile(path, out, 0o644)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	libs := map[string]library{"": now}
	if path := os.Getenv("DLOCK_BENCH_BEFORE"); path != "" {
		var before library
		data, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(data, &before)
		}
		if err != nil {
			b.Fatal(err)
		}
		libs["-before"] = before
	}
	rdb := redistest.Start(b).Client()
	ctx := context.Background()
	for _, lib := range libs {
		if err := rdb.FunctionLoadReplace(ctx, lib.Source).Err(); err != nil {
			b.Fatal(err)
		}
	}
	// The README's user: its rights are checked by Redis at each command.
	acl := []any{"ACL", "SETUSER", "locks", "reset", "on", ">pw"}
	for _, rule := range redistest.DlockACL {
		acl = append(acl, rule)
	}
	if err := rdb.Do(ctx, acl...).Err(); err != nil {
		b.Fatal(err)
	}
	restricted := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, Username: "locks", Password: "pw"})
	defer restricted.Close()
	kinds := []struct {
		name, mode, takenBy string
		rdb                 *redis.Client
	}{{"write", "w", "", rdb}, {"read", "r", "", rdb}, {"reentrant", "w", "ReentrantMutex", rdb}, {"write-acl", "w", "", restricted}}
	usec := func() float64 {
		us, err := serverstats.CommandStat(ctx, rdb, "fcall", "usec")
		if err != nil {
			b.Fatal(err)
		}
		return us
	}
	keys := []string{"dlock:{rw}", "dlock:{rw}:holds", "dlock:{rw}:waiters", "dlock:{rw}:rwaiters", "dlock:{rw}:rpass", "dlock:{rw}:wake", "dlock:{rw}:rwake"}
	acquire := append(slices.Clone(keys), "dlock:{rw}:fence", "dlock:{rw}:void:1")
	release := append(slices.Clone(keys), "dlock:{rw}:released:1")
	total := map[string]float64{}
	for b.Loop() {
		last := usec()
		for suffix, lib := range libs {
			for _, k := range kinds {
				member := k.mode + tok("1") + "owner"
				res, err := k.rdb.FCall(ctx, lib.Acquire, acquire, member, 30000, "", 3000, "", k.takenBy, RightsKnown).Int64Slice()
				if err != nil || res[0] != 1 {
					b.Fatal(res, err)
				}
				if err := k.rdb.FCall(ctx, lib.Release, release, member, "PUBLISH", 5000, 5000, res[1]).Err(); err != nil {
					b.Fatal(err)
				}
				us := usec()
				total[k.name+suffix] += us - last
				last = us
			}
		}
	}
	for name, us := range total {
		b.ReportMetric(us/float64(b.N), "server-µs/"+name)
	}
}
