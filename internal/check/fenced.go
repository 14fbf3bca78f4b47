// Package check holds the checkers that judge a run of locks: what a lock
// protects, watching for what a lock must prevent.
package check

import (
	"sync"
	"time"
)

// Fenced stands for a resource protected by a lock and its fencing tokens.
// Holders call Enter with their lease's token when their critical section
// starts and Exit when it ends. Fenced counts critical sections that
// overlapped, and entries whose token was not above every token seen before
// (a real resource would reject those writes). It also measures handoffs:
// the time from one holder's exit to the entry of another that was already
// asking for the lock.
type Fenced struct {
	Handoffs Latencies

	mu        sync.Mutex
	inside    int
	tokens    tokenOrder
	overlaps  int
	completed int
	lastExit  time.Time
	lastOwner int
}

// Enter records the start of a critical section by holder, with token;
// asked is when holder began asking for the lock. If another holder left
// after that, holder was waiting for it: a handoff.
func (f *Fenced) Enter(holder int, token uint64, asked time.Time) {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.completed > 0 && f.lastOwner != holder && f.lastExit.After(asked) {
		f.Handoffs.Add(now.Sub(f.lastExit))
	}
	f.inside++
	if f.inside > 1 {
		f.overlaps++
	}
	f.tokens.see(token)
}

// Exit records the end of holder's critical section.
func (f *Fenced) Exit(holder int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inside--
	f.completed++
	f.lastExit, f.lastOwner = time.Now(), holder
}

// Result is what a Fenced saw.
type Result struct {
	Completed int    // critical sections that ended
	Overlaps  int    // entries while another holder was inside
	Stale     int    // entries whose token was not above all earlier ones
	Highest   uint64 // the highest token seen
}

// Result returns the counts so far.
func (f *Fenced) Result() Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Result{Completed: f.completed, Overlaps: f.overlaps, Stale: f.tokens.stale, Highest: f.tokens.highest}
}

// tokenOrder is what a fenced resource keeps of the tokens it was shown: the
// highest, and how many were not above it (a real resource refuses those).
type tokenOrder struct {
	highest uint64
	stale   int
}

func (o *tokenOrder) see(token uint64) {
	if token <= o.highest {
		o.stale++
	} else {
		o.highest = token
	}
}
