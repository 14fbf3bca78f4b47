package dlockotel

import (
	"sync"
	"time"
)

// handovers pairs a release in this process with the acquisition that
// follows it by a call of this process that waited for the same lock: the
// one case where one process sees both ends of a hand-over. It remembers a
// lock only while calls of this process wait for it, so it holds no more
// names than there are waiting calls.
type handovers struct {
	mu       sync.Mutex
	waiting  map[string]int       // by lock name: calls registered as waiters, not yet returned
	released map[string]time.Time // by lock name: when a release began while calls waited
}

// registered counts a call that now waits for name.
func (h *handovers) registered(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waiting == nil {
		h.waiting = make(map[string]int)
		h.released = make(map[string]time.Time)
	}
	h.waiting[name]++
}

// releasing notes that a release of name begins, if calls wait for it.
func (h *handovers) releasing(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waiting[name] > 0 {
		h.released[name] = time.Now()
	}
}

// taken ends a call for name that returned, acquired or not, and had
// registered as a waiter or not. It returns when the release the call
// acquired after began, if one of this process's did while it waited.
func (h *handovers) taken(name string, registered, acquired bool) (released time.Time, ok bool) {
	if !registered {
		return time.Time{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	released, ok = h.released[name]
	if acquired {
		delete(h.released, name)
	} else {
		ok = false
	}
	if h.waiting[name]--; h.waiting[name] <= 0 {
		delete(h.waiting, name)
		delete(h.released, name)
	}
	return released, ok
}
