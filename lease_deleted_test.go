package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/scripts"
)

// A write hold of an RWMutex or ReentrantMutex whose state is deleted (DEL
// of the lock's key, FLUSHDB, an eviction) is lost at its next renewal, as
// a Mutex's is, though another writer took the lock meanwhile. Its entry
// in the holds, whether its lease renews or not, never frees the lock that
// writer holds: a third writer is refused once it is gone.
func TestLease_WriteHoldWhoseStateIsDeletedIsReportedLost(t *testing.T) {
	for _, lt := range []struct {
		name string
		try  func(c *dlock.Client, name string) func(context.Context) (*dlock.Lease, error)
	}{
		{"RWMutex", func(c *dlock.Client, name string) func(context.Context) (*dlock.Lease, error) {
			return c.RWMutex(name).TryLock
		}},
		{"ReentrantMutex", func(c *dlock.Client, name string) func(context.Context) (*dlock.Lease, error) {
			return c.ReentrantMutex(name).TryLock
		}},
	} {
		for _, renews := range []bool{true, false} {
			what := "renewed"
			if !renews {
				what = "not renewed"
			}
			t.Run(lt.name+"/"+what, func(t *testing.T) {
				forEachBackend(t, func(t *testing.T, b backend) {
					ctx := ctxFor(t, 30*time.Second)
					name := lockName(t)
					rdb := b.newRedis(t)
					firsts := newClient(t, rdb, dlock.WithTTL(time.Second))
					first, err := lt.try(firsts, name)(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if !renews {
						_ = firsts.Close() // its hold runs out within its TTL
					}
					if err := rdb.Del(ctx, lockKey(name)).Err(); err != nil {
						t.Fatal(err)
					}
					second, err := lt.try(newClient(t, rdb, dlock.WithTTL(10*time.Second)), name)(ctx)
					if err != nil {
						t.Fatalf("a second writer on the deleted state: %v", err)
					}
					if renews {
						waitDone(t, first.Done(), lossGuard, "loss of the write hold whose state was deleted")
						if !errors.Is(first.Err(), dlock.ErrLeaseLost) {
							t.Fatalf("Err of the first hold: %v, want ErrLeaseLost", first.Err())
						}
					}
					third := lt.try(newClient(t, rdb), name)
					holds := lockKey(name) + scripts.HoldsSuffix
					eventually(t, ctx, "the first hold's entry gone", func() bool {
						if l, err := third(ctx); err == nil {
							_ = l.Unlock(ctx)
							t.Fatal("a third writer took the lock the second holds")
						}
						return rdb.ZCard(ctx, holds).Val() == 1
					})
					if err := second.Err(); err != nil {
						t.Fatalf("the second writer's hold: %v", err)
					}
					if err := second.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				})
			})
		}
	}
}
