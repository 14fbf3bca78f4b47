package redistest

import (
	"fmt"
	"os"
	"slices"
	"sync"
)

// T is what starting a server needs from a test: a *testing.T or
// *testing.B, or a [Shared] for servers used by a whole test binary.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// Shared owns servers that live for a whole test binary, so tests that only
// need some server do not each pay for starting one (a cluster takes seconds).
// Start them lazily from tests; call Close after m.Run in TestMain.
type Shared struct {
	mu       sync.Mutex
	cleanups []func()
}

// NewShared returns an empty Shared.
func NewShared() *Shared { return &Shared{} }

// Helper is a no-op: there is no test to attribute lines to.
func (s *Shared) Helper() {}

// Fatalf panics: a shared server that cannot start fails the test that asked.
func (s *Shared) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// Cleanup registers f to run at Close, last registered first.
func (s *Shared) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

// TempDir makes a directory removed at Close, after the cleanups registered
// later (a server's Kill), as testing.T's is.
func (s *Shared) TempDir() string {
	dir, err := os.MkdirTemp("", "redistest")
	if err != nil {
		s.Fatalf("redistest: %v", err)
	}
	s.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Close stops every shared server and removes their directories.
func (s *Shared) Close() {
	s.mu.Lock()
	cleanups := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for _, f := range slices.Backward(cleanups) {
		f()
	}
}
