package notify

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
)

// Waiter is one goroutine's registration on a lock's channel.
type Waiter struct {
	id      string
	shard   *shard // nil when no subscription could be had
	topic   *topic
	channel string
	wake    chan struct{}

	mu      sync.Mutex
	grant   string // what the last wake-up carried after the id, if anything
	refused error  // Redis refused the subscription it waited for (NOPERM)
}

func newWaiterID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ID is the waiter's id: a release that picks this waiter publishes it.
func (w *Waiter) ID() string { return w.id }

// Subscribed reports whether the channel's subscription is confirmed now:
// only then can a release reach this waiter, so only then should it
// register to be picked. One confirmed after Watch returned counts from
// then on; one given up (refused, dropped, or on a node that left the
// cluster's layout) does not come back: watch again.
func (w *Waiter) Subscribed() bool { return w.shard != nil && w.shard.isSubscribed(w.channel) }

// C receives a value when the lock may have become free: a release picked
// this waiter (see [Waiter.Grant]), or the subscription had a gap in which a
// wake-up may have been lost. Without a subscription it never receives.
func (w *Waiter) C() <-chan struct{} { return w.wake }

// Grant returns, and forgets, what the last release that picked this waiter
// published after its id and a colon: a Mutex's release hands the lock over
// and says so there. It is empty after a bare wake-up.
func (w *Waiter) Grant() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.grant
	w.grant = ""
	return g
}

// Close unregisters the waiter from this process. A wake-up it received and
// did not act on is passed on in Redis by the caller (see mutex_abandon.lua),
// where the other clients' waiters are.
func (w *Waiter) Close() {
	if w.shard == nil {
		return
	}
	w.shard.remove(w)
	w.shard = nil
}
