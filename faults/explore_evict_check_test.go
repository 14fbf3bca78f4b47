//go:build faults

package faults

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/scripts"
)

// TestUntilEvictionClears_ASemaphoreWhoseTokensWereEvictedIsRefusedUntilItsHoldersExpire:
// soak M's one failing run (seed 1795762742435565548, an eviction run,
// not replayed: which keys Redis evicts is its own choice). Eviction took
// a Semaphore's tokens hash and left its holders' set; dlock, which cannot
// tell that set from another program's, refused the name with
// ErrWrongType, and the settled run's describe and liveness checks, which
// do not wait, called both violations. The holders' renewals went on,
// which kept the name shut for as long as they lived: dlock's, fixed
// (TestSemaphore_TokensLostFreeTheNameWithinATTL). Now they are refused
// too, and the refusal lasts until the set expires with its last permit,
// within a TTL. In an eviction run the checks wait that long; elsewhere,
// and for a value that does not expire, the refusal stands.
func TestUntilEvictionClears_ASemaphoreWhoseTokensWereEvictedIsRefusedUntilItsHoldersExpire(t *testing.T) {
	const ttl = time.Second
	srv := startServer(t)
	ctx := ctxFor(t, time.Minute)
	c := newClient(t, redisAt(t, srv.Addr()), dlock.WithTTL(ttl))
	name := lockName(t)
	lease, err := c.Semaphore(name, 2).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lease.Unlock(context.Background()) })
	keys := scripts.SemLayout.Keys(lockKey(name))
	if err := srv.Client().Del(ctx, keys[1]).Err(); err != nil { // the tokens hash, as eviction takes it
		t.Fatal(err)
	}
	describe := func() error { _, err := c.Describe(ctx, name); return err }

	if err := untilEvictionClears(ctx, false, describe); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Describe outside an eviction run: %v; want ErrWrongType at once (the premise)", err)
	}
	if err := untilEvictionClears(ctx, true, describe); err != nil {
		t.Fatalf("Describe in an eviction run: %v; want nil once the holders' set expired", err)
	}
	select {
	case <-lease.Done(): // its renewals were refused: nothing extended the set
	case <-time.After(10 * time.Second):
		t.Fatal("the lease of a Semaphore refused as another program's was not lost")
	}
	if err := untilEvictionClears(ctx, true, func() error {
		l, err := c.Semaphore(name, 2).TryAcquire(ctx)
		if err == nil {
			_ = l.Unlock(ctx)
		}
		return err
	}); err != nil {
		t.Fatalf("TryAcquire in an eviction run, once the set expired: %v", err)
	}

	// Another program's sorted set, with no TTL, is refused for good: the
	// check still fails once the longest TTL has passed.
	other := lockName(t)
	if err := srv.Client().ZAdd(ctx, lockKey(other), redis.Z{Score: 1, Member: "a"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := untilEvictionClears(ctx, true, func() error { _, err := c.Describe(ctx, other); return err }); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Describe of another program's sorted set in an eviction run: %v; want ErrWrongType after the wait", err)
	}
}
