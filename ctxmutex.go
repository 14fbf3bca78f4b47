package dlock

import (
	"context"
	"sync"
)

// ctxMutex is a mutex whose Lock gives up when its context ends, so a call
// behind one stuck on a stalled server returns. The zero value is
// unlocked, and allocates nothing until a Lock has to wait.
type ctxMutex struct {
	mu   sync.Mutex
	held bool
	free chan struct{} // closed at the next Unlock; made by the first to wait
}

// Lock locks m, or returns ctx's error, leaving m as it was, once ctx ends.
func (m *ctxMutex) Lock(ctx context.Context) error {
	for {
		m.mu.Lock()
		if !m.held {
			m.held = true
			m.mu.Unlock()
			return nil
		}
		if m.free == nil {
			m.free = make(chan struct{})
		}
		free := m.free
		m.mu.Unlock()
		select {
		case <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TryLock locks m if it is free, and reports whether it did.
func (m *ctxMutex) TryLock() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	took := !m.held
	m.held = true
	return took
}

// Unlock unlocks m and lets every waiting Lock try again.
func (m *ctxMutex) Unlock() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.held = false
	if m.free != nil {
		close(m.free)
		m.free = nil
	}
}
