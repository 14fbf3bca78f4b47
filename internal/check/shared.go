package check

import "time"

// Shared stands for a resource read and written under a read-write lock:
// readers and writers call Enter and Exit around their critical sections;
// Result counts what the lock must prevent. Handoffs are the times from the
// lock becoming free for an entrant (all holders gone, for a writer; the
// writer gone, for a reader) to its entry, if it was asking before that.
type Shared struct {
	WriteHandoffs, ReadHandoffs Latencies

	counts[SharedResult]
	readers, writers int
	allFree          time.Time // the last moment nobody was inside
	writerFree       time.Time // the last moment a writer left
}

// EnterWrite records the start of a write with the writer's token; asked is
// when the writer began asking for the lock.
func (s *Shared) EnterWrite(token uint64, asked time.Time) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.readers > 0 || s.writers > 0 {
		s.r.Conflicts++
	}
	if s.allFree.After(asked) {
		s.WriteHandoffs.Add(now.Sub(s.allFree))
	}
	s.writers++
	seeToken(token, &s.r.Stale, &s.r.Highest)
}

// ExitWrite records the end of a write.
func (s *Shared) ExitWrite() {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writers--
	s.r.Writes++
	s.writerFree = now
	if s.readers == 0 && s.writers == 0 {
		s.allFree = now
	}
}

// EnterRead records the start of a read whose reader began asking at asked.
func (s *Shared) EnterRead(asked time.Time) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writers > 0 {
		s.r.Conflicts++
	}
	if s.writerFree.After(asked) {
		s.ReadHandoffs.Add(now.Sub(s.writerFree))
	}
	s.readers++
}

// ExitRead records the end of a read.
func (s *Shared) ExitRead() {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readers--
	s.r.Reads++
	if s.readers == 0 && s.writers == 0 {
		s.allFree = now
	}
}

// SharedResult is what a Shared saw.
type SharedResult struct {
	Reads, Writes int    // critical sections that ended
	Conflicts     int    // entries that broke many-readers-or-one-writer
	Stale         int    // writes whose token was not above all earlier ones
	Highest       uint64 // the highest write token seen
}
