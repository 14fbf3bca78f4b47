//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// TestUnlockCheck_AReleaseSentPastTheDeadlineIsNoViolation: the "unlock"
// check's false alarm of issue 17 (a soak's seed 1795695845402720621, lost
// replies and late copies on a cluster; 7 of its 65 replays failed so,
// on Mutex and RWMutex leases). A Client sends its acquires and releases
// through at most two round trips at once (dlock's coalescer). With both
// held up, as a late copy's read timeout holds one for a second, an Unlock
// called with most of its lease left waits in the Client, is sent past the
// lease's deadline, and rightly finds the hold expired: ErrNotHeld. The
// check judged the call, which had time to spare, and flagged it; it
// judges the answer now. A hold gone before the deadline is still flagged.
func TestUnlockCheck_AReleaseSentPastTheDeadlineIsNoViolation(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	name := lockName(t)
	held := &heldFlights{busy: name + "-busy", arrived: make(chan struct{}, 2), release: make(chan struct{})}
	rdb := redisWithTimeout(t, srv.Addr(), 10*time.Second)
	rdb.AddHook(beforeSending(held.hold))
	c := newClient(t, rdb)
	lock := c.Mutex(name, dlock.WithLeaseTime(time.Second))

	lease, err := lock.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the Client's two round trips, held up
		go func() { _, _ = c.Mutex(fmt.Sprintf("%s%d", held.busy, i)).TryLock(ctx) }()
	}
	<-held.arrived
	<-held.arrived
	sentBefore := held.others.Load()
	spare := time.Until(lease.Deadline())
	unlocked := make(chan error, 1)
	go func() { unlocked <- lease.Unlock(ctx) }()
	<-lease.Done() // the deadline passed while the release waited in the Client
	for srv.Client().Exists(ctx, lockKey(name)).Val() == 1 {
		time.Sleep(5 * time.Millisecond) // Redis expires the hold a little after the lease's deadline
	}
	if n := held.others.Load() - sentBefore; n != 0 {
		t.Fatalf("%d scripts were sent while both round trips were held; want the release to wait", n)
	}
	close(held.release)
	err = <-unlocked
	answered := time.Now()
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock sent past the deadline: %v, want ErrNotHeld", err)
	}
	if spare < 500*time.Millisecond {
		t.Fatalf("Unlock called with %v to spare; the case needs more than the check's former 500 ms", spare)
	}
	if refusedInTime(err, answered, lease.Deadline()) {
		t.Errorf("Unlock called with %v to spare, answered ErrNotHeld %v past the deadline: judged a violation",
			spare, answered.Sub(lease.Deadline()))
	}

	// A hold gone while its lease counts on it, as a bug would make it:
	// still a violation.
	lease, err = lock.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Client().Del(ctx, lockKey(name))
	err = lease.Unlock(ctx)
	if !refusedInTime(err, time.Now(), lease.Deadline()) {
		t.Errorf("Unlock of a hold deleted before its deadline answered %v in time: not judged a violation", err)
	}
}

// heldFlights holds up every command on the locks whose names start with
// busy until release is closed, as a read timeout holds up a round trip;
// it counts the other scripts sent meanwhile.
type heldFlights struct {
	busy    string
	arrived chan struct{}
	release chan struct{}
	others  atomic.Int32
}

func (h *heldFlights) hold(cmds []redis.Cmder) {
	for _, c := range cmds {
		if strings.Contains(fmt.Sprint(c.Args()), h.busy) {
			h.arrived <- struct{}{}
			<-h.release
			return
		}
	}
	select {
	case <-h.release:
	default:
		if anyScript(cmds) {
			h.others.Add(1)
		}
	}
}

// beforeSending is a go-redis hook that calls f with each command, or each
// pipeline's commands, before they are sent: a test holds them there.
type beforeSending func(cmds []redis.Cmder)

func (f beforeSending) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f beforeSending) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		f([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (f beforeSending) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		f(cmds)
		return next(ctx, cmds)
	}
}
