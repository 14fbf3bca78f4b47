package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// Unlock with a context that never ends is still bounded by CleanupTimeout:
// a frozen server does not hold the caller forever.
func TestLease_UnlockWithBackgroundIsBoundedAgainstAFrozenServer(t *testing.T) {
	t.Parallel() // waits on servers and timers of its own, not on the CPU
	srv := startServer(t)
	// No read timeout of its own: only a context deadline ends a wait.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, ReadTimeout: -1, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	lease, err := newClient(t, rdb).Mutex(lockName(t)).Lock(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	t.Cleanup(srv.Resume)
	unlocked := make(chan error, 1)
	go func() { unlocked <- lease.Unlock(context.Background()) }()
	select {
	case err := <-unlocked:
		if err == nil {
			t.Fatal("Unlock against a frozen server succeeded")
		}
	case <-time.After(5 * dlock.CleanupTimeout): // boundedness, not speed
		t.Fatalf("Unlock(context.Background()) against a frozen server still blocked after %v", 5*dlock.CleanupTimeout)
	}
}
