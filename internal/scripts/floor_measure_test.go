//go:build measure

// A measurement, not a test: how much of a Mutex's server CPU its rules'
// commands cost, whatever the scripts' logic. Three clients take and
// release one lock on one server, in turn, round after round:
//
//   - ideal: SET NX PX, then a compare-and-delete script;
//   - floor: two functions that run exactly the commands of an uncontended
//     Mutex acquire and release, with no other logic;
//   - dlock: the Mutex's own acquire and release.
//
// Run: go test -tags measure -count=1 -v -run TestMeasure_MutexFloor ./internal/scripts/
package scripts

import (
	"context"
	"maps"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/serverstats"
)

// floorLibrary runs the commands TestCommandBudget_UncontendedLockUnlock
// counts for a Mutex, in the order its scripts run them.
const floorLibrary = `#!lua name=floor
redis.register_function('floor_acquire', function(keys, args)
  redis.call('PTTL', keys[4])
  local values = redis.call('MGET', keys[1], keys[2], keys[3])
  redis.call('SET', keys[1], args[1], 'NX', 'GET', 'PX', args[2])
  redis.call('TIME')
  local last = tonumber(values[2]) or 0
  redis.call('SET', keys[2], last + 1)
  return {1, last + 1}
end)
redis.register_function('floor_release', function(keys, args)
  if redis.call('MGET', keys[1], keys[4])[1] ~= args[1] then
    return 0
  end
  redis.call('PTTL', keys[3])
  redis.call('DEL', keys[1])
  redis.call('SET', keys[6], '1', 'PX', 5000)
  return 1
end)
`

func TestMeasure_MutexFloor(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	for _, lib := range []string{Library, floorLibrary} {
		if err := rdb.FunctionLoadReplace(ctx, lib).Err(); err != nil {
			t.Fatal(err)
		}
	}
	compareAndDelete := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	acquireKeys := []string{lockKey, fenceKey, "t:{m}:void:x", waitersKey, "t:{m}:holder"}
	releaseKeys := []string{lockKey, channel, waitersKey, fenceKey, "t:{m}:holder", "t:{m}:released:x"}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	clients := []struct {
		name string
		pair func()
	}{
		{"ideal", func() {
			must(rdb.SetNX(ctx, lockKey, tok("a"), 30e9).Err())
			must(compareAndDelete.Run(ctx, rdb, []string{lockKey}, tok("a")).Err())
		}},
		{"floor", func() {
			must(rdb.FCall(ctx, "floor_acquire", acquireKeys, tok("a"), 30000).Err())
			must(rdb.FCall(ctx, "floor_release", releaseKeys, tok("a")).Err())
		}},
		{"dlock", func() {
			// As a Client sends them: rights known, no holder info.
			reply, err := rdb.FCall(ctx, Function(MutexAcquire), acquireKeys, tok("a"), 30000, "", 3000, "", "", RightsKnown).Int64Slice()
			must(err)
			if reply[0] != 1 {
				t.Fatalf("acquire answered %v", reply)
			}
			released, err := rdb.FCall(ctx, Function(MutexRelease), releaseKeys, tok("a"), "PUBLISH", 5000, "", reply[1], "0").Int()
			must(err)
			if released != 1 {
				t.Fatalf("release answered %d", released)
			}
		}},
	}
	// The floor must run what dlock runs, command for command.
	calls := func(pair func()) map[string]int64 {
		before, err := serverstats.Calls(ctx, rdb)
		must(err)
		pair()
		after, err := serverstats.Calls(ctx, rdb)
		must(err)
		for cmd, n := range before {
			if after[cmd] -= n; after[cmd] == 0 || cmd == "info" {
				delete(after, cmd)
			}
		}
		return after
	}
	if floor, dlock := calls(clients[1].pair), calls(clients[2].pair); !maps.Equal(floor, dlock) {
		t.Fatalf("the floor ran %v, dlock %v", floor, dlock)
	}
	const rounds, pairs = 5, 10000
	cpu := make([]float64, len(clients))
	for range rounds {
		for i, c := range clients {
			before, err := serverstats.CPU(ctx, rdb)
			must(err)
			for range pairs {
				c.pair()
			}
			after, err := serverstats.CPU(ctx, rdb)
			must(err)
			cpu[i] += after - before
		}
	}
	for i, c := range clients {
		t.Logf("%-5s %6.2f µs of server CPU per lock+unlock, %.2f× ideal", c.name, cpu[i]/rounds/pairs*1e6, cpu[i]/cpu[0])
	}
}
