package scripts

import (
	"context"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A campaign's term follows next_token's rule (common.lua), whatever form
// the counter's digits take: one above the last token, never below the
// clock in µs; the counter and the leader's record hold its digits, the
// counter for FenceRetentionTTLs hold TTLs: as a Mutex's acquire, the
// rule's reference, mints.
func TestElectionAcquire_MintsTheTermByTheCountersRule(t *testing.T) {
	ctx, rdb := setup(t)
	const (
		elock, efence, evoid = "t:{e}", "t:{e}:fence", "t:{e}:void:x"
		ewaiters, eleader    = "t:{e}:waiters", "t:{e}:leader"
	)
	ahead := "8000000000000000" // above the clock until the year 2223
	for _, stored := range []string{"", "42", "000000000000000000000042", "1000000000000000",
		ahead, "0" + ahead, "9007199254740990"} {
		var last int64
		if stored != "" {
			last, _ = strconv.ParseInt(stored, 10, 64)
		}
		for _, typ := range []struct {
			name        string
			fence, lock string
			take        func() []int64
		}{
			{"Mutex", fenceKey, lockKey, func() []int64 { return acquire(t, ctx, rdb, tok("a")) }},
			{"Election", efence, elock, func() []int64 {
				return run(t, ctx, rdb, ElectionAcquire, []string{elock, efence, evoid, ewaiters, eleader}, argvOf(ElectionAcquireArgs{Value: "me", Publish: "PUBLISH", Acquire: acq(tok("a"), 10000, "")}, "")...)
			}},
		} {
			rdb.Del(ctx, typ.lock, typ.fence, eleader)
			if stored != "" {
				rdb.Set(ctx, typ.fence, stored, 0)
			}
			before := time.Now().Add(-time.Minute).UnixMicro() // the server's clock is this machine's, within a minute
			got := typ.take()
			after := time.Now().Add(time.Minute).UnixMicro()
			if len(got) != 2 || got[0] != 1 {
				t.Fatalf("%s with %q as its counter: %v; want {1, a token}", typ.name, stored, got)
			}
			term := got[1]
			if last+1 >= before && term != last+1 || last+1 < before && (term < before || term > after) {
				t.Errorf("%s with %q as its counter minted %d; want one above %d, never below the clock", typ.name, stored, term, last)
			}
			digits := strconv.FormatInt(term, 10)
			if v := rdb.Get(ctx, typ.fence).Val(); v != digits {
				t.Errorf("%s with %q as its counter: the counter holds %q; want %q", typ.name, stored, v, digits)
			}
			want := FenceRetentionTTLs * 10 * time.Second
			if left := rdb.PTTL(ctx, typ.fence).Val(); left <= want-time.Minute || left > want {
				t.Errorf("%s with %q as its counter: it expires in %v; want %v", typ.name, stored, left, want)
			}
			if typ.name == "Election" {
				if v := rdb.HGet(ctx, eleader, "term").Val(); v != digits {
					t.Errorf("with %q as its counter: the leader's term is %q; want %q", stored, v, digits)
				}
			}
		}
	}
}

// A campaign that finds a leader's record left (its lock ran out, never
// resigned) or candidates waiting checks every key first (foreign_key's
// checks), then mints by the same rule; a counter dlock did not write
// fails it, naming the counter, and nothing is written.
func TestElectionAcquire_BesideALeftRecordTheCounterIsJudgedAlike(t *testing.T) {
	ctx, rdb := setup(t)
	const (
		elock, efence, evoid = "t:{e}", "t:{e}:fence", "t:{e}:void:x"
		ewaiters, eleader    = "t:{e}:waiters", "t:{e}:leader"
	)
	keys := []string{elock, efence, evoid, ewaiters, eleader}
	for _, c := range []struct {
		stored func() // the counter, after the record is left
		last   int64  // -1: refused
		err    string // what the refusal says
	}{
		{func() {}, 0, ""},
		{func() { rdb.Set(ctx, efence, "8000000000000000", 0) }, 8000000000000000, ""},
		{func() { rdb.Set(ctx, efence, "0042", 0) }, 42, ""},
		{func() { rdb.Set(ctx, efence, "not-a-number", 0) }, -1, "WRONGTYPE key " + efence + " is not a fencing counter"},
		{func() { rdb.Set(ctx, efence, "9007199254740991", 0) }, -1, "WRONGTYPE key " + efence + " is not a fencing counter"},
		{func() { rdb.RPush(ctx, efence, "x") }, -1, "WRONGTYPE " + efence + " holds a list"},
	} {
		rdb.Del(ctx, elock, efence, eleader)
		rdb.HSet(ctx, eleader, "owner", tok("b"), "term", "7", "value", "gone") // its lock ran out
		c.stored()
		before := dump(t, ctx, rdb, keys)
		since := time.Now().Add(-time.Minute).UnixMicro()
		res, err := AcquireReply(ElectionAcquire.Run(ctx, rdb, keys, argvOf(ElectionAcquireArgs{Value: "me", Publish: "PUBLISH", Acquire: acq(tok("a"), 10000, "")}, "")...))
		if c.last < 0 {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, %v; want %q", c.err, res, err, c.err)
			}
			if after := dump(t, ctx, rdb, keys); !maps.Equal(before, after) {
				t.Errorf("%q: the keys changed: %v, then %v", c.err, before, after)
			}
			continue
		}
		if err != nil || len(res) != 2 || res[0] != 1 {
			t.Fatalf("counter %d: %v, %v; want {1, a term}", c.last, res, err)
		}
		if c.last+1 >= since && res[1] != c.last+1 || c.last+1 < since && res[1] < since {
			t.Errorf("counter %d: term %d; want one above it, never below the clock", c.last, res[1])
		}
		if v := rdb.HGet(ctx, eleader, "term").Val(); v != strconv.FormatInt(res[1], 10) {
			t.Errorf("counter %d: the record's term is %q; want %d", c.last, v, res[1])
		}
	}
}

// dump is keys' values as DUMP gives them, and their TTLs.
func dump(t *testing.T, ctx context.Context, rdb *redis.Client, keys []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range keys {
		out[k] = rdb.Dump(ctx, k).Val() + "/" + strconv.FormatBool(rdb.PTTL(ctx, k).Val() > 0)
	}
	return out
}
