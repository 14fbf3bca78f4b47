package dlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// The errors a user reads name the lock, say each thing once, and show no
// internal operation names.
func TestMessages_SayWhatAndWhichOnce(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb)
	name := lockName(t)
	if _, err := c.Mutex(name).TryLock(ctx); err != nil {
		t.Fatal(err)
	}

	_, err := c.Mutex(name).TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), `"`+name+`"`) {
		t.Errorf("TryLock of a held lock: %v; want ErrNotAcquired naming %q", err, name)
	}

	// A name another type of lock holds is not called data dlock did not write.
	_, err = c.RWMutex(name).TryLock(ctx)
	if !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(err.Error(), "Mutex's hold") || strings.Contains(err.Error(), "did not write") {
		t.Errorf("an RWMutex on a Mutex's name: %v; want ErrWrongType saying a Mutex holds it", err)
	}
	if _, err := c.Semaphore(name+"-sem", 2).TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = c.Mutex(name + "-sem").TryLock(ctx)
	if !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(err.Error(), "another type of lock") {
		t.Errorf("a Mutex on a Semaphore's name: %v; want ErrWrongType saying another type of lock may hold it", err)
	}

	rdb.Set(ctx, lockKey(name+"-foreign"), "not dlock's", 0)
	_, err = c.Mutex(name + "-foreign").TryLock(ctx)
	if !errors.Is(err, dlock.ErrWrongType) || strings.Contains(err.Error(), "(lock)") {
		t.Errorf("TryLock of a foreign key: %v; want ErrWrongType with no internal operation name", err)
	}
	_, err = c.Describe(ctx, name+"-foreign")
	if !errors.Is(err, dlock.ErrWrongType) || strings.Contains(err.Error(), "(describe)") {
		t.Errorf("Describe of a foreign key: %v; want ErrWrongType with no internal operation name", err)
	}

	servers := redistest.StartMasters(t, 3)
	rl := redlockOver(t, servers, dlock.WithRestartGuard(time.Hour)).Mutex(name)
	_, err = rl.TryLock(ctx)
	if n := strings.Count(err.Error(), "restart guard"); !errors.Is(err, dlock.ErrUnavailable) || n != 1 {
		t.Errorf("a Redlock on three fresh nodes: %v; want ErrUnavailable saying 'restart guard' once, not %d times", err, n)
	}
	var qe *dlock.QuorumError
	if !errors.As(err, &qe) || len(qe.Nodes) != 3 {
		t.Errorf("a Redlock on three fresh nodes: %v; want a QuorumError with every node's error", err)
	}
}
