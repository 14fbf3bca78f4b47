//go:build faults

package faults

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestWaitKeysGone_AKeyReadBeforeTheDeadlineIsNotLeftAfterIt: soak M's
// "keys left" (seed 1795762742435567400), the checker's. A pass over a
// Redlock run's keys (hundreds of tombstones a master, one PTTL each) took
// seconds at a load of 17; it read a lock key early, with 1.4 s of its TTL
// left, and ended past the deadline, which then counted the key as left,
// though it was gone seconds before. A pass is now judged by when it
// began; a key a pass begun after the deadline still finds is still left.
func TestWaitKeysGone_AKeyReadBeforeTheDeadlineIsNotLeftAfterIt(t *testing.T) {
	ctx := context.Background()
	start := time.Unix(1_000_000, 0)
	deadline := start.Add(5 * time.Second)
	for _, tc := range []struct {
		what  string
		reads [][]string // what each pass finds; each pass takes 3 s
		want  []string
	}{
		{"read in time by a slow pass, then gone", [][]string{{"k"}, {"k"}, nil}, nil},
		{"still there on a pass begun after the deadline", [][]string{{"k"}, {"k"}, {"k"}}, []string{"k"}},
		{"gone at once", [][]string{nil}, nil},
	} {
		t.Run(tc.what, func(t *testing.T) {
			clock := start
			pass := 0
			got := waitKeysGone(ctx, func() time.Time { return clock }, deadline, func() []string {
				found := tc.reads[min(pass, len(tc.reads)-1)]
				pass++
				clock = clock.Add(3 * time.Second)
				return found
			})
			if !slices.Equal(got, tc.want) {
				t.Errorf("left %v after %d passes; want %v", got, pass, tc.want)
			}
		})
	}
}
