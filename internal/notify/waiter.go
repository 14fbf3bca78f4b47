package notify

// Waiter is one goroutine's registration on a lock's channel.
type Waiter struct {
	shard   *shard // nil when no subscription could be had
	topic   *topic
	channel string
	wake    chan struct{}
}

// C receives a value when the lock may have become free: a release was
// published, or the subscription had a gap in which one may have been lost.
// Without a subscription it never receives.
func (w *Waiter) C() <-chan struct{} { return w.wake }

// Close unregisters the waiter. With passOn, or when a wake-up reached it
// that it did not take, the next waiter on the channel is woken in its place:
// a waiter that leaves must not swallow the release meant for somebody.
func (w *Waiter) Close(passOn bool) {
	if w.shard == nil {
		return
	}
	w.shard.remove(w, passOn)
	w.shard = nil
}
