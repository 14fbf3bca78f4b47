package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
)

// A MultiLock's refused attempt ran 6 commands for one lock and 12 for
// three before 681960d (EXISTS, then GET of each counter, PTTL of each
// waiters set, GET of each lock, PTTL of the busy one). The acquire now
// reads the counters by MGET first, finds the group not free, and reads
// each counter again by GET in foreign_key: one command more on every
// refused attempt, whatever the group's size.
func TestCommandBudget_MultiLockRefusedTryLockCostsNoMoreThanBefore(t *testing.T) {
	for _, typ := range []struct {
		names  []string
		budget int64
	}{
		{[]string{"budget:a"}, 6},
		{[]string{"budget:a", "budget:b", "budget:c"}, 12},
	} {
		t.Run(typ.names[len(typ.names)-1], func(t *testing.T) {
			ctx := ctxFor(t, 30*time.Second)
			srv := redistest.Start(t)
			c := newClient(t, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
			held, err := c.Mutex(typ.names[len(typ.names)-1]).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = held.Unlock(ctx) }()
			m := c.MultiLock(typ.names)
			try := func() {
				if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
					t.Fatalf("TryLock with a lock held: %v, want ErrNotAcquired", err)
				}
			}
			try() // scripts loaded, connections made
			for range 2 {
				calls := callsOf(t, ctx, srv, try)
				if n := sum(calls); n > typ.budget {
					t.Errorf("a refused TryLock of %d locks ran %d Redis commands (%v); before 681960d, %d", len(typ.names), n, calls, typ.budget)
				}
			}
		})
	}
}

// A contended turn of a MultiLock of one name (every group on a Cluster
// whose names hash to different slots, the usual case) ran 33 commands
// before 681960d; the extra MGET of each attempt that finds the lock
// held or handed over now makes it 35. (Of three names: 57 then, 55 now.)
func TestCommandBudget_ContendedMultiLockOfOneCostsNoMoreThanBefore(t *testing.T) {
	contended(t, 33, scripts.MultiAcquire, func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) {
		return c.MultiLock([]string{"budget"}).Lock
	})
}
