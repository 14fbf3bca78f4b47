package scripts

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A renewal only ever moves a hold's expiry later: one that arrives late
// (held on the network, resent after a read timeout), asking for the TTL the
// lease had before an Extend to a longer one, leaves the longer in place.
// An explicit Extend (ARGV[3] '1') sets the TTL asked for, shorter or not.

// extendCase is one extend script with a hold to extend: take acquires it
// (for 10 s) and returns the member or owner the extend and TTL scripts
// take, with extKeys; keys are those the hold's expiry lives on.
type extendCase struct {
	name          string
	extend, ttl   *redis.Script
	extKeys, keys []string
	take          func(t *testing.T, ctx context.Context, rdb *redis.Client) string
}

var extendCases = []extendCase{
	{"MutexExtend", MutexExtend, MutexTTL, []string{lockKey}, []string{lockKey},
		func(t *testing.T, ctx context.Context, rdb *redis.Client) string {
			expectGranted(t, acquire(t, ctx, rdb, tok("a")), "the lock")
			return tok("a")
		}},
	{"RWExtend", RWExtend, RWTTL, rwKeys[:2], []string{rwState, rwHolds},
		func(t *testing.T, ctx context.Context, rdb *redis.Client) string {
			a := hold("w", "1", "alice")
			expectGranted(t, tryRW(t, ctx, rdb, a, ""), "the write lock")
			return a
		}},
	{"SemExtend", SemExtend, SemTTL, semKeys[:3], []string{"t:{m}", "t:{m}:tokens", "t:{m}:permits"},
		func(t *testing.T, ctx context.Context, rdb *redis.Client) string {
			expectGranted(t, semTry(t, ctx, rdb, tok("a"), 1), "a permit")
			return tok("a")
		}},
	{"MultiExtend", MultiExtend, MultiTTL, multiKeys, []string{"t:{m}", "t:{n}"},
		func(t *testing.T, ctx context.Context, rdb *redis.Client) string {
			expectGranted(t, multiTry(t, ctx, rdb, tok("a"), "", 1), "the group")
			return tok("a")
		}},
}

func TestExtendScripts_RenewalNeverShortensExplicitExtendMay(t *testing.T) {
	for _, c := range extendCases {
		t.Run(c.name, func(t *testing.T) {
			ctx, rdb := setup(t)
			owner := c.take(t, ctx, rdb)
			// left fails the test unless the hold and every key it lives on
			// have between lo and hi ms left.
			left := func(lo, hi int64, when string) {
				t.Helper()
				ms := runInt(t, ctx, rdb, c.ttl, c.extKeys, owner)
				if ms < lo || ms > hi {
					t.Fatalf("%s: the hold has %d ms left, want %d..%d", when, ms, lo, hi)
				}
				for _, key := range c.keys {
					if ms := rdb.PTTL(ctx, key).Val().Milliseconds(); ms < lo || ms > hi {
						t.Fatalf("%s: %s has %d ms left, want %d..%d", when, key, ms, lo, hi)
					}
				}
			}

			if n := runInt(t, ctx, rdb, c.extend, c.extKeys, owner, 60000); n != 1 {
				t.Fatalf("renewal to 60 s: %d, want 1", n)
			}
			left(50000, 60000, "after a renewal to 60 s")
			if n := runInt(t, ctx, rdb, c.extend, c.extKeys, owner, 2000); n != 1 {
				t.Fatalf("late renewal to 2 s: %d, want 1 (held)", n)
			}
			left(50000, 60000, "after a late renewal to 2 s")
			if n := runInt(t, ctx, rdb, c.extend, c.extKeys, owner, 2000, "1"); n != 1 {
				t.Fatalf("Extend to 2 s: %d, want 1", n)
			}
			left(1, 2000, "after an explicit Extend to 2 s")
			if n := runInt(t, ctx, rdb, c.extend, c.extKeys, owner, 5000); n != 1 {
				t.Fatalf("renewal to 5 s: %d, want 1", n)
			}
			left(4000, 5000, "after a renewal to 5 s")
		})
	}
}
