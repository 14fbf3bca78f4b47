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

// The server's time per call of each type's scripts, uncontended (a
// Mutex's acquire, extend and release; the others' acquire and release),
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
	// A round of a type: its scripts, run by send; a release sends the
	// token its acquire minted. Every acquire must grant, or the round
	// would time another path.
	type send func(s *redis.Script, keys []string, args ...any) []any
	granted := func(got []any) []any {
		if len(got) == 0 || got[0] != int64(1) {
			b.Fatalf("an acquire did not grant: %v", got)
		}
		return got
	}
	void, mark := "t:{m}:void:x", "t:{m}:released:x"
	multi := []string{ // key by key (see partLocals)
		"t:{m}", "t:{m}:b", "t:{m}:c", "t:{m}:fence", "t:{m}:b:fence", "t:{m}:c:fence",
		"t:{m}:waiters", "t:{m}:b:waiters", "t:{m}:c:waiters", "t:{m}:wake", "t:{m}:b:wake", "t:{m}:c:wake",
	}
	types := []struct {
		name  string
		round func(send)
	}{
		{"Mutex", func(run send) {
			granted(run(MutexAcquire, []string{lockKey, fenceKey, void, waitersKey, "t:{m}:holder"}, tok("a"), 30000, "", 3000, "", ""))
			run(MutexExtend, []string{lockKey, "t:{m}:forced", "t:{m}:holder"}, tok("a"), 30000, 1, "")
			run(MutexRelease, []string{lockKey, channel, waitersKey, fenceKey, "t:{m}:holder", mark}, tok("a"), "PUBLISH", 0, "")
		}},
		{"FairMutex", func(run send) {
			keys := []string{lockKey, fenceKey, "t:{m}:queue", waitersKey, channel, "t:{m}:holder"}
			got := granted(run(FairAcquire, with(keys, fairA), fairA, 30000, "", 3000, "PUBLISH", ""))
			run(FairRelease, append(keys, mark), fairA, "PUBLISH", got[1], "0")
		}},
		{"Semaphore", func(run send) {
			got := granted(run(SemAcquire, with(semAcquireKeys, tok("a")), tok("a"), 30000, "", 3000, 4, ""))
			run(SemRelease, append(semKeys[:5:5], mark), tok("a"), "PUBLISH", got[1])
		}},
		{"MultiLock of 3", func(run send) {
			got := granted(run(MultiAcquire, with(multi, tok("a")), tok("a"), 30000, "", 3000, 1, "PUBLISH"))
			run(MultiRelease, append(multi[:12:12], mark), tok("a"), "PUBLISH", got[1], got[2], got[3])
		}},
		{"Election", func(run send) {
			got := granted(run(ElectionAcquire, []string{lockKey, fenceKey, void, waitersKey, "t:{m}:leader"}, tok("a"), 30000, "", 3000, "me", "PUBLISH"))
			run(ElectionRelease, []string{lockKey, waitersKey, "t:{m}:leader", mark}, tok("a"), "PUBLISH", got[1])
		}},
	}
	for _, typ := range types {
		b.Run(typ.name, func(b *testing.B) {
			sender := func(evalsha bool) send {
				return func(s *redis.Script, keys []string, args ...any) []any {
					var cmd *redis.Cmd
					if evalsha {
						cmd = rdb.EvalSha(ctx, s.Hash(), keys, args...)
					} else {
						cmd = rdb.FCall(ctx, Function(s), keys, args...)
					}
					if err := cmd.Err(); err != nil {
						b.Fatal(err)
					}
					if token, ok := cmd.Val().(int64); ok { // a grant's token alone (AcquireReply)
						return []any{int64(1), token}
					}
					got, _ := cmd.Val().([]any)
					return got
				}
			}
			evalsha, fcall := sender(true), sender(false)
			for _, s := range []*redis.Script{MutexAcquire, MutexExtend, MutexRelease, FairAcquire, FairRelease, SemAcquire, SemRelease, MultiAcquire, MultiRelease, ElectionAcquire, ElectionRelease} {
				if err := s.Load(ctx, rdb).Err(); err != nil {
					b.Fatal(err)
				}
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				typ.round(evalsha)
				typ.round(fcall)
			}
			for _, cmd := range []string{"evalsha", "fcall"} {
				usec, err := serverstats.CommandStat(ctx, rdb, cmd, "usec_per_call")
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(usec, "server-µs/"+cmd)
			}
		})
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
				res, err := AcquireReply(k.rdb.FCall(ctx, lib.Acquire, acquire, member, 30000, "", 3000, "", k.takenBy, RightsKnown))
				if err != nil || res[0] != 1 {
					b.Fatal(res, err)
				}
				if err := k.rdb.FCall(ctx, lib.Release, release, member, "PUBLISH", res[1]).Err(); err != nil {
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
