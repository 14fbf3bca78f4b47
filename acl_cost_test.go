//go:build measure

// A measurement, not a test: the server's µs per script (EVALSHA or FCALL) as the default
// user and as the README's ACL user, interleaved on one server so that a
// busy machine weighs on both alike. Run:
//
//	go test -tags measure -count=1 -v -run TestMeasure_RightsCost .
package dlock_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// evalshaUsec reads INFO commandstats' evalsha calls and usec.
func evalshaUsec(ctx context.Context, rdb *redis.Client, cmd string) (calls, usec float64) {
	info := rdb.Info(ctx, "commandstats").Val()
	for line := range strings.SplitSeq(info, "\n") {
		stats, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for field := range strings.SplitSeq(stats, ",") {
			name, value, _ := strings.Cut(field, "=")
			switch name {
			case "calls":
				calls, _ = strconv.ParseFloat(value, 64)
			case "usec":
				usec, _ = strconv.ParseFloat(value, 64)
			}
		}
	}
	return calls, usec
}

// perCall runs op n times and reads the server's µs per cmd over them.
func perCall(ctx context.Context, admin *redis.Client, cmd string, n int, op func() error) (float64, error) {
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		return 0, err
	}
	for range n {
		if err := op(); err != nil {
			return 0, err
		}
	}
	calls, usec := evalshaUsec(ctx, admin, cmd)
	fcalls, fusec := evalshaUsec(ctx, admin, "fcall")
	return (usec + fusec) / (calls + fcalls), nil
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// TestMeasure_RightsCost prints the median server µs per script of an
// uncontended lock+unlock of several types, and of raw scripts: the
// commands of a Mutex's acquire and release without any rights check (what
// the server's own ACL checks cost), 20 acl_check_cmd alone, and nothing.
func TestMeasure_RightsCost(t *testing.T) {
	srv := startServer(t)
	ctx := ctxFor(t, 10*time.Minute)
	admin := srv.Client()
	user := aclUser(t, ctx, admin, "locks", append(dlockACL, "+info", "+eval")...)
	clients := map[string]redis.UniversalClient{"default": srv.Client(), "restricted": user}
	const rounds, n = 30, 1000

	dlocks := map[string]*dlock.Client{}
	for who, rdb := range clients {
		dlocks[who] = newClient(t, rdb)
	}
	pair := func(lock func(context.Context) (*dlock.Lease, error)) func() error {
		return func() error {
			l, err := lock(ctx)
			if err != nil {
				return err
			}
			return l.Unlock(ctx)
		}
	}
	type lockFunc = func(context.Context) (*dlock.Lease, error)
	types := map[string]func(c *dlock.Client) lockFunc{
		"mutex":     func(c *dlock.Client) lockFunc { return c.Mutex("bench").Lock },
		"rw write":  func(c *dlock.Client) lockFunc { return c.RWMutex("bench-rw").Lock },
		"semaphore": func(c *dlock.Client) lockFunc { return c.Semaphore("bench-sem", 2).Acquire },
		"fair":      func(c *dlock.Client) lockFunc { return c.FairMutex("bench-fair").Lock },
	}
	// Raw scripts: the commands of an uncontended Mutex acquire and
	// release, without any acl_check_cmd; and 20 acl_check_cmd alone.
	raw := map[string]string{
		"commands": `
local v = redis.call('GET', KEYS[1])
redis.call('TYPE', KEYS[2]); redis.call('TYPE', KEYS[3])
redis.call('SET', KEYS[1], 'x', 'NX', 'GET', 'PX', 10000)
redis.call('EXISTS', KEYS[4])
redis.call('INCR', KEYS[2]); redis.call('TIME'); redis.call('PEXPIRE', KEYS[2], 100000)
redis.call('PTTL', KEYS[1]); redis.call('DEL', KEYS[1]); redis.call('ZRANGEBYSCORE', KEYS[3], 0, 1)
return 1`,
		"checks20": `
local ok = true
for i = 1, 20 do ok = ok and redis.acl_check_cmd('zadd', KEYS[1]) end
return 1`,
		"empty": `return 1`,
	}
	keys := []string{"dlock:{r}", "dlock:{r}:fence", "dlock:{r}:waiters", "dlock:{r}:tomb"}
	results := map[string][]float64{}
	for range rounds {
		for _, who := range []string{"default", "restricted"} {
			for typ, lock := range types {
				us, err := perCall(ctx, admin, "evalsha", n, pair(lock(dlocks[who])))
				if err != nil {
					t.Fatal(who, err)
				}
				results[typ+" lock+unlock/"+who] = append(results[typ+" lock+unlock/"+who], us)
			}
			for name, src := range raw {
				s := redis.NewScript(src)
				rdb := clients[who]
				us, err := perCall(ctx, admin, "evalsha", n, func() error { return s.Run(ctx, rdb, keys).Err() })
				if err != nil {
					t.Fatal(who, name, err)
				}
				results["raw "+name+"/"+who] = append(results["raw "+name+"/"+who], us)
			}
		}
	}
	var names []string
	for k := range results {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		xs := results[k]
		slices.Sort(xs)
		fmt.Printf("%-40s median %.2f µs per script (p25 %.2f, min %.2f) over %d rounds of %d\n", k, median(xs), xs[len(xs)/4], xs[0], rounds, n)
	}
}
