package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/family"
)

// timerLate is a context whose deadline has passed while its own timer has
// not fired yet, as on a loaded machine: go-redis sets its connections'
// deadlines from Deadline, so a command fails with an i/o timeout before
// Err says the context is done.
type timerLate struct {
	context.Context // done 5 s on: a timer that ran very late
	deadline        time.Time
}

func (c timerLate) Deadline() (time.Time, bool) { return c.deadline, true }

// TestAcquire_ADeadlinePassedIsTheContextsEvenBeforeItsTimerRan: an
// acquire cut short by its context's deadline says so (ErrNotAcquired and
// context.DeadlineExceeded), even when the connection's deadline fired
// before the context's own timer (issue 17's soak: a fault-free run's
// Election campaign returned "write tcp ...: i/o timeout" 18 ms after it
// was called with a short deadline, and a MultiLock's 179 ms after).
func TestAcquire_ADeadlinePassedIsTheContextsEvenBeforeItsTimerRan(t *testing.T) {
	srv := startServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	name := lockName(t)
	calls := map[string]func(ctx context.Context) error{}
	for _, k := range serverKinds() { // one attempt each; an Election's Campaign with no wait
		calls[k.Label()] = func(ctx context.Context) error {
			_, err := k.Take(ctx, family.Target{Client: c}, namesOf(k, name+"-"+string(k.Kind)), true, dlock.WithWait(0))
			return err
		}
	}
	for call, f := range calls {
		base, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := f(timerLate{Context: base, deadline: time.Now().Add(-time.Millisecond)})
		cancel()
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s past its context's deadline: %v, want ErrNotAcquired and DeadlineExceeded", call, err)
		}
	}
}
