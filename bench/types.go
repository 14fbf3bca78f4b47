package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/serverstats"
)

// A lockType is one of dlock's lock types, for workload 6: lock takes it
// once on the servers addrs (one, or a Redlock's three).
type lockType struct {
	name       string
	servers    int
	restricted bool // the client logs in as a user with the README's rights, not as the default user
	lock       func(ctx context.Context, c *dlock.Client, r *dlock.Redlock) (*dlock.Lease, error)
}

var lockTypes = []lockType{
	{"Mutex", 1, false, func(ctx context.Context, c *dlock.Client, _ *dlock.Redlock) (*dlock.Lease, error) {
		return c.Mutex("bench:mutex").Lock(ctx)
	}},
	{"Mutex, the README's ACL user", 1, true, func(ctx context.Context, c *dlock.Client, _ *dlock.Redlock) (*dlock.Lease, error) {
		return c.Mutex("bench:mutex").Lock(ctx)
	}},
	{"ReentrantMutex", 1, false, func(ctx context.Context, c *dlock.Client, _ *dlock.Redlock) (*dlock.Lease, error) {
		return c.ReentrantMutex("bench:reentrant").Lock(ctx)
	}},
	{"RWMutex read", 1, false, func(ctx context.Context, c *dlock.Client, _ *dlock.Redlock) (*dlock.Lease, error) {
		return c.RWMutex("bench:rw").RLock(ctx)
	}},
	{"RWMutex write", 1, false, func(ctx context.Context, c *dlock.Client, _ *dlock.Redlock) (*dlock.Lease, error) {
		return c.RWMutex("bench:rw").Lock(ctx)
	}},
	{"RWMutex write, the README's ACL user", 1, true, func(ctx context.Context, c *dlock.Client, _ *dlock.Redlock) (*dlock.Lease, error) {
		return c.RWMutex("bench:rw").Lock(ctx)
	}},
	{"FairMutex", 1, false, func(ctx context.Context, c *dlock.Client, _ *dlock.Redlock) (*dlock.Lease, error) {
		return c.FairMutex("bench:fair").Lock(ctx)
	}},
	{"Semaphore", 1, false, func(ctx context.Context, c *dlock.Client, _ *dlock.Redlock) (*dlock.Lease, error) {
		return c.Semaphore("bench:sem", 4).Acquire(ctx)
	}},
	{"MultiLock of 3", 1, false, func(ctx context.Context, c *dlock.Client, _ *dlock.Redlock) (*dlock.Lease, error) {
		return c.MultiLock([]string{"bench:a", "bench:b", "bench:c"}).Lock(ctx)
	}},
	{"Election", 1, false, func(ctx context.Context, c *dlock.Client, _ *dlock.Redlock) (*dlock.Lease, error) {
		return c.Election("bench:election").Campaign(ctx, "me")
	}},
	{"Redlock, per node", 3, false, func(ctx context.Context, _ *dlock.Client, r *dlock.Redlock) (*dlock.Lease, error) {
		return r.Mutex("bench:redlock").Lock(ctx)
	}},
}

// typeResult is workload 6's measurements of one type, per lock+unlock
// and per node. It is JSON for -types -json, which a later run reads with
// -before to show an earlier commit's figures beside its own.
type typeResult struct {
	Name     string
	Pair     time.Duration // wall time
	CPU      time.Duration // the server's CPU (INFO cpu)
	Commands float64       // Redis commands, inside scripts counted
	Scripts  float64       // script calls: EVALSHA or FCALL
	PerCall  float64       // µs of server time per script call (commandstats usec)
	Before   *typeResult   `json:"-"` // the -before run's figures, if any
}

// types is workload 6: one goroutine takes and releases each of dlock's
// lock types, uncontended, on servers of its own. The figures are per node.
func types(ctx context.Context, servers *redistest.Shared, scale float64) ([]typeResult, error) {
	var results []typeResult
	for _, typ := range lockTypes {
		res, err := measureType(ctx, servers, typ, time.Duration(scale*float64(time.Second)))
		if err != nil {
			return results, fmt.Errorf("%s: %w", typ.name, err)
		}
		results = append(results, res)
	}
	return results, nil
}

// beforeLabel names the -before run, as the tables head its column.
var beforeLabel string

// typesBeside is types, with the figures of the -before binary's run (spec
// LABEL=BINARY), made just before, beside each type of the same name.
func typesBeside(ctx context.Context, servers *redistest.Shared, scale float64, spec string, quick bool) ([]typeResult, error) {
	var before []typeResult
	if spec != "" {
		label, bin, ok := strings.Cut(spec, "=")
		if !ok {
			return nil, fmt.Errorf("-before %q: want LABEL=BINARY", spec)
		}
		args := []string{"-types", "-json"}
		if quick {
			args = append(args, "-quick")
		}
		fmt.Fprintf(os.Stderr, "dlock's types at %s\n", label)
		out, err := exec.CommandContext(ctx, bin, args...).Output()
		if err != nil {
			return nil, fmt.Errorf("-before %s: %w", label, err)
		}
		if err := json.Unmarshal(out, &before); err != nil {
			return nil, fmt.Errorf("-before %s: %w", label, err)
		}
		beforeLabel = label
	}
	rows, err := types(ctx, servers, scale)
	for i := range rows {
		for j := range before {
			if before[j].Name == rows[i].Name {
				rows[i].Before = &before[j]
			}
		}
	}
	return rows, err
}

// restrictedClient is a client of rdb's server that logs in as a user
// with the README's rights (and INFO, which the bench reads).
func restrictedClient(ctx context.Context, rdb *redis.Client) (*redis.Client, error) {
	args := []any{"ACL", "SETUSER", "locks", "reset", "on", ">secret"}
	for _, rule := range append(redistest.DlockACL, "+info") {
		args = append(args, rule)
	}
	if err := rdb.Do(ctx, args...).Err(); err != nil {
		return nil, err
	}
	o := *rdb.Options()
	o.Username, o.Password = "locks", "secret"
	return redis.NewClient(&o), nil
}

func measureType(ctx context.Context, servers *redistest.Shared, typ lockType, d time.Duration) (typeResult, error) {
	var nodes []*redis.Client
	var universal []redis.UniversalClient
	for range typ.servers {
		rdb := redisClient(redistest.Start(servers).Addr())
		defer rdb.Close()
		nodes, universal = append(nodes, rdb), append(universal, rdb)
	}
	rdb := nodes[0]
	if typ.restricted {
		var err error
		if rdb, err = restrictedClient(ctx, rdb); err != nil {
			return typeResult{}, err
		}
		defer rdb.Close()
	}
	c, err := dlock.New(rdb, dlock.WithTTL(benchTTL))
	if err != nil {
		return typeResult{}, err
	}
	defer c.Close()
	var r *dlock.Redlock
	if len(universal) > 1 {
		if r, err = newRedlock(universal, dlock.WithTTL(benchTTL), dlock.WithRestartGuard(0)); err != nil { // fresh servers
			return typeResult{}, err
		}
	}
	pair := func() error {
		lease, err := typ.lock(ctx, c, r)
		if err != nil {
			return err
		}
		return lease.Unlock(ctx)
	}
	for range 50 { // scripts loaded, connections made
		if err := pair(); err != nil {
			return typeResult{}, err
		}
	}
	var cpuBefore, commandsBefore float64
	for _, node := range nodes {
		if err := node.ConfigResetStat(ctx).Err(); err != nil {
			return typeResult{}, err
		}
		cpu, _ := serverstats.CPU(ctx, node)
		cpuBefore += cpu
	}
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		if err := pair(); err != nil {
			return typeResult{}, err
		}
		n++
	}
	wall := time.Since(start)
	res := typeResult{Name: typ.name, Pair: wall / time.Duration(n)}
	var cpu, usec float64
	for _, node := range nodes {
		s, _ := serverstats.CPU(ctx, node)
		cpu += s
		commands, _ := serverstats.Commands(ctx, node)
		commandsBefore += float64(commands)
		calls, us, err := scriptStats(ctx, node)
		if err != nil {
			return typeResult{}, err
		}
		res.Scripts += calls
		usec += us
	}
	perNode := float64(n * typ.servers)
	res.CPU = time.Duration((cpu - cpuBefore) / perNode * float64(time.Second))
	res.Commands = commandsBefore / perNode
	res.PerCall = usec / max(res.Scripts, 1)
	res.Scripts /= perNode
	return res, nil
}

// scriptStats reads the calls of scripts (EVALSHA, FCALL) and the µs they
// took from INFO commandstats.
func scriptStats(ctx context.Context, rdb *redis.Client) (calls, usec float64, err error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		name, stats, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch name {
		case "cmdstat_evalsha", "cmdstat_fcall":
		default:
			continue
		}
		for field := range strings.SplitSeq(stats, ",") {
			name, value, _ := strings.Cut(field, "=")
			v, _ := strconv.ParseFloat(value, 64)
			switch name {
			case "calls":
				calls += v
			case "usec":
				usec += v
			}
		}
	}
	return calls, usec, nil
}
