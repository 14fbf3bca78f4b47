//go:build faults

package faults

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// redlockGuard is the explored Redlocks' restart guard: at least the
// longest TTL a schedule draws (3 s), as the guard's contract asks, so a
// master restarted empty votes again only once every hold it lost has
// expired on the others.
const redlockGuard = 3 * time.Second

// waitVoting returns once the Redlock's masters are old enough to vote.
func waitVoting(t *testing.T, masters []*redistest.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), redlockGuard+10*time.Second)
	defer cancel()
	waitUptime(t, ctx, masters, redlockGuard)
}

func newExploredRedlock(masters []redis.UniversalClient) *dlock.Redlock {
	return dlock.NewRedlock(masters, dlock.WithRestartGuard(redlockGuard))
}

// checkRedlockSettled: no Redlock held by a quorum of masters once every
// holder let go. A single master may keep a hold for its TTL, where a
// fault or the node timeout cut its release short, as documented.
func checkRedlockSettled(ctx context.Context, masters []redis.UniversalClient, s *schedule, doubtful map[string]bool, out *outcome) {
	for _, name := range s.names["redlock"] {
		out.checks++
		held := 0
		for _, m := range masters {
			c, err := dlock.New(m)
			if err != nil {
				out.violate("new: %v", err)
				return
			}
			info, err := c.Describe(ctx, name)
			c.Close()
			if err == nil && info.Type != "" {
				held++
			}
		}
		if held > len(masters)/2 && !doubtful[name] && !s.has("pause") && !s.has("flushall") && !s.has("restart") {
			out.violate("orphan: Redlock %s is held on %d of %d masters after every holder let go", name, held, len(masters))
		}
	}
}
