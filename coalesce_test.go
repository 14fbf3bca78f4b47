package dlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// Many goroutines of one Client share round trips: their acquires and
// releases go out in pipelines while others are in flight, also right after
// the server forgot the scripts.
func TestClient_ConcurrentCallsShareRoundTrips(t *testing.T) {
	const goroutines, rounds = 64, 20
	forEachBackend(t, func(t *testing.T, b backend) {
		rdb := b.newRedis(t)
		counter := &commandCounter{}
		rdb.AddHook(counter)
		c := newClient(t, rdb)
		mutexes := make([]*dlock.Mutex, goroutines)
		for i := range mutexes {
			mutexes[i] = c.Mutex(fmt.Sprint(lockName(t), ":", i))
		}
		for _, flush := range []bool{false, true} {
			if flush {
				if err := rdb.ScriptFlush(ctxFor(t, time.Minute)).Err(); err != nil {
					t.Fatal(err)
				}
			}
			runWorkers(t, goroutines, func(ctx context.Context, g int) error {
				for range rounds {
					lease, err := mutexes[g].Lock(ctx)
					if err != nil {
						return err
					}
					if err := lease.Unlock(ctx); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if counter.pipelines.Load() == 0 {
			t.Fatalf("%d goroutines of one Client never shared a round trip", goroutines)
		}
		t.Logf("%d commands sent; %d pipelines of queued calls", counter.commands.Load(), counter.pipelines.Load())
	})
}
