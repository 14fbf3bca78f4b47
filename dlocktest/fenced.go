package dlocktest

import (
	"errors"
	"fmt"
	"sync"
)

// ErrStaleToken is returned by [FencedStore.Put] for a write whose fencing
// token is below the highest the key has accepted: its writer's lease was
// lost, and someone else has held the lock since.
var ErrStaleToken = errors.New("dlocktest: stale fencing token")

// FencedStore is a tiny in-memory resource that trusts fencing tokens, as the
// store a lock protects should. It refuses a write whose token is below the
// highest accepted for that key, not one equal to it: one holder may write
// many times. Tests and examples show with it that a stale holder cannot do
// harm. Its zero value is ready, safe for concurrent use.
type FencedStore struct {
	mu   sync.Mutex
	data map[string]fencedValue
}

type fencedValue struct {
	value string
	token uint64
}

// Put writes value at key with token, the writer's fencing token
// ([github.com/dlockio/dlock.Lease.Token]). It returns an error matching
// [ErrStaleToken], and changes nothing, if a higher token wrote there.
func (s *FencedStore) Put(key string, token uint64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		s.data = make(map[string]fencedValue)
	}
	if cur, ok := s.data[key]; ok && token < cur.token {
		return fmt.Errorf("%w: %q was written with token %d, this write has %d", ErrStaleToken, key, cur.token, token)
	}
	s.data[key] = fencedValue{value: value, token: token}
	return nil
}

// Get returns the value at key and the token that wrote it; ok is false
// when nothing was written there.
func (s *FencedStore) Get(key string) (value string, token uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[key]
	return v.value, v.token, ok
}
