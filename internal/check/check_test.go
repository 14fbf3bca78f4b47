package check

import (
	"testing"
	"time"
)

// The checker must see what it is for before any run it judges counts.
func TestFenced_FlagsOverlapAndStaleTokens(t *testing.T) {
	var f Fenced
	now := time.Now()
	f.Enter(1, 5, now)
	f.Enter(2, 4, now) // inside together, and with a lower token
	f.Exit(2)
	f.Exit(1)
	f.Enter(3, 5, now) // equal to the highest: stale too
	f.Exit(3)
	got := f.Result()
	if got.Overlaps != 1 || got.Stale != 2 || got.Completed != 3 || got.Highest != 5 {
		t.Fatalf("got %+v, want 1 overlap, 2 stale, 3 completed, highest 5", got)
	}
}

func TestFenced_SequentialIncreasingTokensAreClean(t *testing.T) {
	var f Fenced
	for token := uint64(1); token <= 3; token++ {
		f.Enter(int(token), token, time.Now())
		f.Exit(int(token))
	}
	if got := f.Result(); got.Overlaps != 0 || got.Stale != 0 || got.Completed != 3 {
		t.Fatalf("got %+v, want a clean run of 3", got)
	}
}

// A handoff is counted only from another holder's exit to the entry of one
// that was asking before that exit.
func TestFenced_CountsHandoffsToWaitingHolders(t *testing.T) {
	var f Fenced
	f.Enter(1, 1, time.Now())
	asked := time.Now() // holder 2 starts waiting while 1 holds
	f.Exit(1)
	f.Enter(2, 2, asked) // a handoff
	f.Exit(2)
	f.Enter(2, 3, time.Now()) // the same holder again: no handoff
	f.Exit(2)
	f.Enter(3, 4, time.Now()) // asked after 2 left: it did not wait, no handoff
	f.Exit(3)
	if n := f.Handoffs.Count(); n != 1 {
		t.Fatalf("%d handoffs counted, want 1", n)
	}
}

func TestLatencies_Percentiles(t *testing.T) {
	var l Latencies
	if l.Percentile(50) != 0 {
		t.Fatal("percentile of nothing is not 0")
	}
	for i := 1; i <= 100; i++ {
		l.Add(time.Duration(i) * time.Millisecond)
	}
	if p50, p99 := l.Percentile(50), l.Percentile(99); p50 != 50*time.Millisecond || p99 != 99*time.Millisecond {
		t.Fatalf("p50 %v p99 %v, want 50ms 99ms", p50, p99)
	}
}

func TestShared_FlagsWritersWithAnyoneAndStaleWrites(t *testing.T) {
	var s Shared
	now := time.Now()
	s.EnterRead(now)
	s.EnterRead(now) // two readers: fine
	s.EnterWrite(3, now)
	s.ExitWrite()
	s.ExitRead()
	s.ExitRead()
	s.EnterWrite(4, now)
	s.EnterRead(now) // a reader with a writer
	s.ExitRead()
	s.ExitWrite()
	s.EnterWrite(2, now) // lower than 4
	s.ExitWrite()
	got := s.Result()
	if got.Conflicts != 2 || got.Stale != 1 || got.Reads != 3 || got.Writes != 3 || got.Highest != 4 {
		t.Fatalf("got %+v, want 2 conflicts, 1 stale, 3 reads, 3 writes, highest 4", got)
	}
}

func TestShared_MeasuresHandoffsToWaitingEntrants(t *testing.T) {
	var s Shared
	s.EnterWrite(1, time.Now())
	asked := time.Now() // a reader and a writer wait while the writer holds
	s.ExitWrite()
	s.EnterRead(asked)
	s.ExitRead()
	s.EnterWrite(2, asked)
	s.ExitWrite()
	s.EnterRead(time.Now()) // asked after the last writer left: no handoff
	s.ExitRead()
	if r, w := s.ReadHandoffs.Count(), s.WriteHandoffs.Count(); r != 1 || w != 1 {
		t.Fatalf("%d read and %d write handoffs, want 1 and 1", r, w)
	}
}

func TestBounded_FlagsTooManyHoldersAndRepeatedTokens(t *testing.T) {
	b := Bounded{Limit: 2}
	b.Enter(1)
	b.Enter(2)
	b.Enter(3) // a third holder of two permits
	b.Exit()
	b.Enter(2) // a token granted twice
	for range 3 {
		b.Exit()
	}
	want := BoundedResult{Completed: 4, Most: 3, Over: 2, Repeated: 1}
	if got := b.Result(); got != want {
		t.Fatalf("%+v; want %+v", got, want)
	}
}

func TestBounded_HoldersWithinTheLimitAreClean(t *testing.T) {
	b := Bounded{Limit: 2}
	for token := uint64(1); token <= 6; token += 2 {
		b.Enter(token)
		b.Enter(token + 1)
		b.Exit()
		b.Exit()
	}
	want := BoundedResult{Completed: 6, Most: 2}
	if got := b.Result(); got != want {
		t.Fatalf("%+v; want %+v", got, want)
	}
}
