package scripts

import (
	"context"
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
			got := granted(run(FairAcquire, with(keys, fairA), argvOf(FairAcquireArgs{Publish: "PUBLISH", Acquire: acq(fairA, 30000, "")}, "")...))
			run(FairRelease, append(keys, mark), fairA, "PUBLISH", got[1], "0")
		}},
		{"Semaphore", func(run send) {
			got := granted(run(SemAcquire, with(semAcquireKeys, tok("a")), argvOf(SemAcquireArgs{Permits: 4, Acquire: acq(tok("a"), 30000, "")}, "")...))
			run(SemRelease, append(semKeys[:5:5], mark), tok("a"), "PUBLISH", got[1])
		}},
		{"MultiLock of 3", func(run send) {
			got := granted(run(MultiAcquire, with(multi, tok("a")), argvOf(MultiAcquireArgs{Publish: "PUBLISH", Acquire: acq(tok("a"), 30000, ""), Watch: 1}, "")...))
			run(MultiRelease, append(multi[:12:12], mark), tok("a"), "PUBLISH", got[1], got[2], got[3])
		}},
		{"Election", func(run send) {
			got := granted(run(ElectionAcquire, []string{lockKey, fenceKey, void, waitersKey, "t:{m}:leader"}, argvOf(ElectionAcquireArgs{Value: "me", Publish: "PUBLISH", Acquire: acq(tok("a"), 30000, "")}, "")...))
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
