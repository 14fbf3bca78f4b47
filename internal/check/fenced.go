// Package check holds the checkers that judge a run of locks: what a lock
// protects, watching for what a lock must prevent.
package check

import (
	"sync"
	"time"
)

// Fenced stands for a resource protected by a lock and its fencing tokens:
// holders call Enter with their lease's token when their critical section
// starts and Exit when it ends; Result counts what the lock must prevent.
// Handoffs are the times from one holder's exit to the entry of another
// already asking for the lock.
type Fenced struct {
	Handoffs Latencies

	counts[Result]
	inside    int
	lastExit  time.Time
	lastOwner int
}

// Enter records the start of holder's critical section, with token; asked
// is when holder began asking for the lock (see Handoffs).
func (f *Fenced) Enter(holder int, token uint64, asked time.Time) {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.r.Completed > 0 && f.lastOwner != holder && f.lastExit.After(asked) {
		f.Handoffs.Add(now.Sub(f.lastExit))
	}
	f.inside++
	if f.inside > 1 {
		f.r.Overlaps++
	}
	seeToken(token, &f.r.Stale, &f.r.Highest)
}

// Exit records the end of holder's critical section.
func (f *Fenced) Exit(holder int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inside--
	f.r.Completed++
	f.lastExit, f.lastOwner = time.Now(), holder
}

// Result is what a Fenced saw.
type Result struct {
	Completed int    // critical sections that ended
	Overlaps  int    // entries while another holder was inside
	Stale     int    // entries whose token was not above all earlier ones
	Highest   uint64 // the highest token seen
}

// counts is a checker's lock and the counts its Result returns.
type counts[R any] struct {
	mu sync.Mutex
	r  R
}

// Result returns the counts so far.
func (c *counts[R]) Result() R {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.r
}

// seeToken is a fenced resource shown token: one not above the highest so
// far is stale (a real resource refuses it); one above is the new highest.
func seeToken(token uint64, stale *int, highest *uint64) {
	if token <= *highest {
		*stale++
	} else {
		*highest = token
	}
}
