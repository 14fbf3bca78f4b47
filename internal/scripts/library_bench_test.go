package scripts

import (
	"context"
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
