//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// The explorer's eviction fault, a labelled one: the run's own standalone
// server gets a maxmemory just above what it uses and an evicting policy,
// and a filler writes keys until Redis evicts, for a while. docs/SAFETY.md
// ("What it cannot promise: Eviction") says what fails: a held lock
// vanishes and a second owner takes it while the first lease still counts
// itself valid. What must still hold: tokens never go back (a counter
// evicted restarts above every earlier token), so the usurper's token is
// above the holder's and the fenced store refuses the holder's writes from
// then on (checkFencedOverlaps). Not on a cluster (its nodes serve other
// runs' lanes... and CONFIG SET would need every master) nor on the
// Redlock's masters, which every run of a lane shares.

// evictPolicies are the policies an eviction run draws from: each can
// delete a held lock (every held lock has a TTL).
var evictPolicies = []string{"allkeys-lru", "allkeys-random", "volatile-lru", "volatile-random", "volatile-ttl"}

// evictFault is the run's eviction: when, for how long, with which policy.
type evictFault struct {
	At, For time.Duration
	Policy  string
}

// evictSchedule draws the eviction from a stream of its own.
func evictSchedule(p params) (evictFault, bool) {
	if !p.has("evict") || p.Cluster {
		return evictFault{}, false
	}
	rng := rand.New(rand.NewPCG(p.Seed, 0xe71c7))
	return evictFault{At: time.Duration(100+rng.IntN(1000)) * time.Millisecond,
		For: time.Duration(1000+rng.IntN(2000)) * time.Millisecond, Policy: evictPolicies[rng.IntN(len(evictPolicies))]}, true
}

// evictFaults runs the run's eviction, if it has one, on a goroutine of
// its own; the returned wait returns once the server is back to no limit,
// and counts the keys Redis evicted.
func evictFaults(ctx context.Context, env *exploreEnv, s *schedule) (wait func(out *outcome)) {
	f, ok := evictSchedule(s.params)
	if !ok || env.cluster {
		return func(*outcome) {}
	}
	rdb := env.nodes[0].Client()
	done := make(chan struct{})
	var errs []string
	go func() {
		defer close(done)
		if sleepCtx(ctx, f.At) != nil {
			return
		}
		used, err := usedMemory(ctx, rdb)
		if err == nil {
			err = rdb.ConfigSet(ctx, "maxmemory-policy", f.Policy).Err()
		}
		if err == nil {
			// Just above what the server uses: the filler's first writes
			// push it to evict, and every write after that evicts again.
			err = rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+64<<10, 10)).Err()
		}
		if err != nil {
			errs = append(errs, err.Error())
			return
		}
		end := time.Now().Add(f.For)
		value := strings.Repeat("f", 512)
		for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
			// With a TTL, so that volatile-* policies evict them too (and
			// lock keys alike); a name outside the run's keys.
			_ = rdb.Set(ctx, fmt.Sprintf("fill:%d:%d", s.Seed, i), value, time.Minute).Err()
			if i%50 == 49 {
				_ = sleepCtx(ctx, time.Millisecond)
			}
		}
		// The fault ends: no limit, and the filler gone, before the
		// settling checks.
		if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			errs = append(errs, err.Error())
		}
		rdb.Del(ctx, fillerKeys(ctx, rdb, s.Seed)...)
	}()
	return func(out *outcome) {
		<-done
		for _, e := range errs {
			out.violate("evict: %s", e)
		}
		out.injected["evict"]++
		if n, err := evictedKeys(context.Background(), rdb); err == nil {
			out.injected["evict.keys"] += n
		}
	}
}

func fillerKeys(ctx context.Context, rdb *redis.Client, seed uint64) []string {
	keys, _ := rdb.Keys(ctx, fmt.Sprintf("fill:%d:*", seed)).Result()
	if len(keys) == 0 {
		return []string{fmt.Sprintf("fill:%d:none", seed)}
	}
	return keys
}

// usedMemory is INFO memory's used_memory, in bytes.
func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	return infoField(ctx, rdb, "memory", "used_memory")
}

// evictedKeys is INFO stats' evicted_keys: how many keys Redis evicted.
func evictedKeys(ctx context.Context, rdb *redis.Client) (int, error) {
	n, err := infoField(ctx, rdb, "stats", "evicted_keys")
	return int(n), err
}

func infoField(ctx context.Context, rdb *redis.Client, section, field string) (int64, error) {
	info, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO %s has no %s", section, field)
}

// checkFencedOverlaps: in a run whose faults may give a lock two holders
// at once as documented, fencing still catches it. Of two overlapping
// holders, one that asked for the lock only once the other held it was
// minted its token later, so its token is the higher: once it writes, the
// fenced store refuses every write of the holder it usurped. (By when the
// holds began alone the order may be either: a grant whose reply came
// late began, as its holder saw it, after a usurper that Redis granted
// later.) A token minted below the holder's, a counter lost to eviction
// and restarted low, would let the stale holder's writes through.
func checkFencedOverlaps(s *schedule, holds []hold, out *outcome) {
	if !s.has("evict") && !(s.has("ctakeover") && s.Cluster) {
		return
	}
	for i, a := range holds {
		for _, b := range holds[i+1:] {
			overlap := b.start.Before(a.end) && a.start.Before(b.end)
			if !overlap || !a.exclusive() && !b.exclusive() {
				continue
			}
			for _, pair := range [][2]hold{{a, b}, {b, a}} {
				held, usurper := pair[0], pair[1]
				if !usurper.asked.After(held.start) {
					continue
				}
				for name, t1 := range held.tokens {
					t2, ok := usurper.tokens[name]
					if !ok {
						continue
					}
					out.checks++
					if t2 <= t1 {
						out.violate("unfenced overlap: %s held by client %d (token %d) when client %d asked for it and was granted token %d; the store would accept the first's writes",
							name, held.client, t1, usurper.client, t2)
					}
				}
			}
		}
	}
}

// untilEvictionClears calls f again while it fails with ErrWrongType in an
// eviction run (evicted), until the longest TTL has passed. Eviction may
// take a Semaphore's tokens hash and leave its holders' set, which dlock
// then cannot tell from another program's: it refuses the name with
// ErrWrongType, the safe side, until the set expires with its last permit,
// within a TTL, for no renewal extends it (docs/SAFETY.md, "Eviction").
// Outside eviction runs, or once the TTL has passed, f's error stands.
func untilEvictionClears(ctx context.Context, evicted bool, f func() error) error {
	deadline := time.Now().Add(longestTTL)
	for {
		err := f()
		if !evicted || !errors.Is(err, dlock.ErrWrongType) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond): // nothing to wait on but the key's expiry
		}
	}
}
