// Package clock is the time a dlock Client's (or Redlock's) leases read:
// the machine's own (a nil *Clock), or, in fault tests, that of a process
// whose machine can be suspended (Suspend, Resume), as a laptop's lid is
// closed, or its wall clock moved alone (Jump).
//
// A time.Time cannot hold a lagging monotonic and a current wall reading,
// so a Clock's reading is the machine's time less the lag, with how far
// its wall clock lags in its Location (Wall puts it back; Add and Round
// keep it; comparisons ignore it). A step of the machine's wall clock moves
// both of a Clock's clocks; only a nil Clock keeps them apart.
package clock

import (
	"fmt"
	"reflect"
	"sync"
	"time"
	"unsafe"
)

// Clock is a suspendable process's clock; nil is the machine's. Its zero
// value is not ready: use New.
type Clock struct {
	mu       sync.Mutex
	lag      time.Duration // how far readings lag real time: the time suspended so far
	jumped   time.Duration // how far the wall clock was moved ahead (Jump)
	stopped  time.Time     // while suspended: the reading that stands still
	since    time.Time     // while suspended: the real time it began
	resumed  chan struct{} // while suspended: closed by Resume
	zone     *time.Location
	wallLags map[*time.Location]time.Duration // each zone's readings' wall lag
}

// New returns a running Clock that reads the machine's time.
func New() *Clock {
	c := &Clock{wallLags: map[*time.Location]time.Duration{}}
	c.setZone()
	return c
}

// setZone makes the Location of the readings from now on; c.mu must be
// held, or c not yet shared.
func (c *Clock) setZone() {
	wallLag := c.lag + c.jumped
	c.zone = time.FixedZone(fmt.Sprintf("clock-lag-%v", wallLag), 0)
	c.wallLags[c.zone] = wallLag
}

// Now is the process's reading of the time: time.Now for a nil Clock.
func (c *Clock) Now() time.Time {
	if c == nil {
		return time.Now()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resumed != nil {
		return c.stopped
	}
	return time.Now().Add(-c.lag).In(c.zone)
}

// Until is t.Sub(c.Now()): how long c's monotonic clock takes to reach t.
func (c *Clock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// Since is c.Now().Sub(t).
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Wall is the process's wall clock at t, a reading of c's (or computed from
// one): t plus how far the wall clock had gone past it. For a nil Clock,
// t.Round(0).
func (c *Clock) Wall(t time.Time) time.Time {
	t = t.Round(0)
	if c == nil {
		return t
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return t.Add(c.wallLags[t.Location()])
}

// Wait returns once the process is not suspended; at once for a nil Clock.
func (c *Clock) Wait() {
	if ch := c.Resumed(); ch != nil {
		<-ch
	}
}

// Resumed is closed when the suspension under way ends; nil when the
// process is not suspended (or c is nil).
func (c *Clock) Resumed() <-chan struct{} {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resumed
}

// Suspend stops the process's clock: its readings stand still and Wait
// blocks, until Resume. Suspending a suspended process does nothing.
func (c *Clock) Suspend() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resumed != nil {
		return
	}
	c.since = time.Now()
	c.stopped = c.since.Add(-c.lag).In(c.zone)
	c.resumed = make(chan struct{})
}

// Resume ends a suspension: from now on readings lag real time by its
// length more, and wall readings do not, as on Linux. It returns how long
// the process was suspended (0 when it was not).
func (c *Clock) Resume() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resumed == nil {
		return 0
	}
	suspended := time.Since(c.since)
	c.lag += suspended
	c.setZone()
	close(c.resumed)
	c.resumed = nil
	return suspended
}

// Jump moves the process's wall clock ahead by d, its monotonic clock
// staying put: as after a suspension of d, without the wait.
func (c *Clock) Jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.jumped += d
	c.setZone()
}

// Real is the real time at which the process's monotonic clock reads t (a
// reading, or computed from one), unless suspended again. For a nil Clock, t.
func (c *Clock) Real(t time.Time) time.Time {
	if c == nil {
		return t
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return t.Add(c.lag)
}

// Use makes target, a *dlock.Client or *dlock.Redlock not used yet, read c
// by setting its field named clock: the fault tests reach dlock only
// through internal packages, and this one cannot import dlock.
func Use(target any, c *Clock) {
	v := reflect.ValueOf(target)
	if v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
		v = v.Elem().FieldByName("clock")
	}
	if !v.IsValid() || v.Type() != reflect.TypeOf(c) {
		panic(fmt.Sprintf("clock.Use: a %T has no clock field", target))
	}
	reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem().Set(reflect.ValueOf(c))
}
