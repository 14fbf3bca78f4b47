//go:build faults

package faults

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// failAfter is a go-redis hook that fails every renewal with err after
// wait, sending none: a renewer whose renewals fail.
type failAfter struct {
	wait time.Duration
	err  error
}

func (f failAfter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f failAfter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return f.fail([]redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (f failAfter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return f.fail(cmds, func() error { return next(ctx, cmds) })
	}
}

func (f failAfter) fail(cmds []redis.Cmder, next func() error) error {
	if !anyRenewal(cmds) {
		return next()
	}
	time.Sleep(f.wait)
	return setErr(cmds, f.err)
}

// TestQuickFailure_ARenewalFailedSoonerThanATimeoutIsNoStarvation: the
// withholding mutation (explore_mutate_test.go) found the checker
// excusing 107 of 277 losses of renewals kept from Redis as starvation,
// in a 24-lane soak. A renewal that comes back with an error sooner
// than any timeout of dlock's fires, an error that is no timeout (which a
// starved process may see that soon) nor NOSCRIPT (after which dlock
// loads the script and sends it again), is told (quickFailure), and such
// a loss is unexplained whatever the starvation; one that failed as late
// as a timeout, or with those errors, is not told.
func TestQuickFailure_ARenewalFailedSoonerThanATimeoutIsNoStarvation(t *testing.T) {
	srv := startServer(t)
	bad := errors.New("ERR a renewal gone wrong")
	for _, c := range []struct {
		wait time.Duration
		err  error
		told bool
	}{
		{0, bad, true},
		{quickFailed + 10*time.Millisecond, bad, false},
		{0, errLostReply, false},
		{0, context.DeadlineExceeded, false},
	} {
		trace := newCommandTrace()
		rdb := newRedisAt(srv.Addr())
		rdb.AddHook(trace) // first, so outermost, as the explorer's
		rdb.AddHook(failAfter{c.wait, c.err})
		client, err := dlock.New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		name := lockName(t)
		ctx := context.Background()
		began := time.Now()
		lease, err := client.Mutex(name, dlock.WithTTL(300*time.Millisecond)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		<-lease.Done()
		if !errors.Is(lease.Err(), dlock.ErrLeaseLost) {
			t.Fatalf("the lease whose renewals fail ended with %v, want lost", lease.Err())
		}
		told := trace.quickFailure([]string{name}, began, lease.Deadline())
		if (told != "") != c.told || c.told && !strings.Contains(told, name) {
			t.Errorf("renewals failing %v after they were sent with %v: told %q, want told %v", c.wait, c.err, told, c.told)
		}
		client.Close()
		rdb.Close()
	}

	// The checker: a loss with a renewal that failed so is unexplained,
	// however starved its process.
	now := time.Now()
	h := hold{client: 1, kind: "mutex", tokens: map[string]uint64{"n": 1}, asked: now, start: now, end: now.Add(time.Second),
		lost: true, loss: dlock.LossUnreachable, starved: time.Second, ttl: time.Second, deadline: now.Add(time.Second),
		lossSeen: now.Add(time.Second), renewalFailed: "a renewal failed at once"}
	out := &outcome{injected: map[string]int{}}
	checkHolds(&schedule{}, []hold{h}, nil, out)
	if out.starved != 0 || len(out.violations) != 1 || !strings.HasPrefix(out.violations[0], "unexplained loss: client 1 ") {
		t.Errorf("a loss starved a whole TTL with a renewal that failed at once: %d starved, violations %q; want it unexplained", out.starved, out.violations)
	}
}
