package clock

import (
	"testing"
	"time"
)

// within reports whether a and b are at most d apart.
func within(a, b time.Time, d time.Duration) bool { return a.Sub(b).Abs() <= d }

func TestNil_IsTheMachinesClock(t *testing.T) {
	var c *Clock
	if now := c.Now(); !within(now, time.Now(), time.Second) {
		t.Errorf("nil Now %v, want about time.Now", now)
	}
	if ch := c.Resumed(); ch != nil {
		t.Error("a nil Clock is suspended")
	}
	c.Wait()
	at := time.Now()
	if w := c.Wall(at); w != at.Round(0) {
		t.Errorf("nil Wall(%v) = %v, want it without its monotonic reading", at, w)
	}
	if r := c.Real(at); r != at {
		t.Errorf("nil Real(%v) = %v", at, r)
	}
}

// A suspension stops the readings; once resumed, monotonic readings lag
// real time by its length, wall readings (Wall) do not, and a deadline
// computed before it keeps the wall clock it was read on.
func TestClock_SuspendedReadingsStandStillAndLagOnceResumed(t *testing.T) {
	c := New()
	before := c.Now()
	deadline := before.Add(time.Hour)
	c.Suspend()
	resumed := c.Resumed()
	if resumed == nil {
		t.Fatal("suspended, Resumed is nil")
	}
	stopped := c.Now()
	time.Sleep(50 * time.Millisecond) // the suspension
	if again := c.Now(); again != stopped {
		t.Errorf("readings moved while suspended: %v then %v", stopped, again)
	}
	suspended := c.Resume()
	select {
	case <-resumed:
	default:
		t.Error("Resumed not closed by Resume")
	}
	c.Wait()
	if suspended < 50*time.Millisecond {
		t.Errorf("suspended for %v, want at least 50ms", suspended)
	}
	now, real := c.Now(), time.Now()
	if lag := real.Sub(now); lag < suspended || lag > suspended+time.Second {
		t.Errorf("monotonic readings lag %v once resumed, want about %v", lag, suspended)
	}
	if w := c.Wall(now); !within(w, real.Round(0), time.Second) || w.Before(now.Round(0).Add(suspended)) {
		t.Errorf("Wall of a reading after the resume %v, want the machine's wall clock %v", w, real.Round(0))
	}
	if w := c.Wall(deadline); w != deadline.Round(0) {
		t.Errorf("Wall of a deadline read before the suspension %v, want %v", w, deadline.Round(0))
	}
	if left := c.Wall(deadline).Sub(c.Wall(now)); left > time.Hour-suspended {
		t.Errorf("by the wall clock the deadline is %v away, want no more than %v", left, time.Hour-suspended)
	}
	if left := deadline.Sub(now); left < time.Hour-time.Second || left > time.Hour {
		t.Errorf("by the monotonic clock the deadline is %v away, want about an hour: it stood still", left)
	}
	if r := c.Real(now); !within(r, real, time.Second) {
		t.Errorf("Real(%v) = %v, want about %v", now, r, real)
	}
}

// Jump moves the wall clock alone.
func TestClock_JumpMovesTheWallClockAlone(t *testing.T) {
	c := New()
	before := c.Now()
	c.Jump(time.Minute)
	now := c.Now()
	if d := now.Sub(before); d < 0 || d > time.Second {
		t.Errorf("monotonic readings moved %v with the jump", d)
	}
	if d := c.Wall(now).Sub(c.Wall(before)); d < time.Minute || d > time.Minute+time.Second {
		t.Errorf("wall readings moved %v, want a minute", d)
	}
}

// A reading's Location carries its wall lag, and setting it strips the
// monotonic reading (see the package comment): what a reading's Sub and
// comparisons read is the machine's wall clock less the lag.
func TestClock_ReadingsCarryNoMonotonicReading(t *testing.T) {
	c := New()
	if now := c.Now(); now != now.Round(0) {
		t.Errorf("a reading %v carries a monotonic reading; the package comment says it has none", now)
	}
	var machine *Clock
	if now := machine.Now(); now == now.Round(0) {
		t.Errorf("a nil Clock's reading %v has no monotonic reading", now)
	}
}

// Use sets the clock field of any struct, as dlock's Client and Redlock
// have, with no hook for dlock to install first.
func TestUse_SetsTheTargetsClockField(t *testing.T) {
	var target struct {
		other int
		clock *Clock
	}
	c := New()
	Use(&target, c)
	if target.clock != c {
		t.Fatalf("clock field %p; want %p", target.clock, c)
	}
}
