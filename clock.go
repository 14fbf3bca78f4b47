package dlock

import "github.com/dlockio/dlock/internal/clock"

// The fault tests (faults/, a module of its own) suspend a process's
// clock through internal/clock, which cannot name a Client: this fills in
// its hook. It changes no state of its own, and costs nothing but a
// function value.
func init() {
	clock.Use = func(target any, c *clock.Clock) {
		switch t := target.(type) {
		case *Client:
			t.clock = c
		case *Redlock:
			t.clock = c
		default:
			panic("clock.Use: not a *dlock.Client or *dlock.Redlock")
		}
	}
}
