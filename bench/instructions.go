package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// instructionsResult is one type's server instructions per uncontended
// lock+unlock (per node for a Redlock), for -instructions; JSON for -json.
type instructionsResult struct {
	Name         string
	Instructions int64
}

// callgrindServer is a redis-server run under callgrind, whose counters
// callgrind_control zeroes and dumps.
type callgrindServer struct {
	cmd  *exec.Cmd
	dir  string
	addr string
}

// startCallgrind starts redis-server under callgrind on a free loopback
// port. hz 1 keeps the server's cron, which is not the locks' work, small.
func startCallgrind() (*callgrindServer, error) {
	dir, err := os.MkdirTemp("", "dlock-callgrind-")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &callgrindServer{dir: dir, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	s.cmd = exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+filepath.Join(dir, "cg.out"),
		"redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--hz", "1", "--dir", dir)
	s.cmd.Stdout, s.cmd.Stderr = nil, nil
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) { // it listens once ready
		if conn, err := net.Dial("tcp", s.addr); err == nil {
			_ = conn.Close()
			return s, nil
		}
		if time.Since(start) > time.Minute {
			s.close()
			return nil, errors.New("redis-server under callgrind did not listen within a minute")
		}
	}
}

func (s *callgrindServer) close() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	_ = os.RemoveAll(s.dir)
}

// callgrindTotals is the events line callgrind writes at the end of a dump.
var callgrindTotals = regexp.MustCompile(`(?m)^totals: (\d+)`)

// control runs callgrind_control with flag (-z zeroes, -d dumps) on the
// server; after a dump, it returns the dump's instructions.
func (s *callgrindServer) control(flag string) (int64, error) {
	pid := strconv.Itoa(s.cmd.Process.Pid)
	if out, err := exec.Command("callgrind_control", flag, pid).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("callgrind_control %s: %w: %s", flag, err, out)
	}
	if flag != "-d" {
		return 0, nil
	}
	dumps, _ := filepath.Glob(filepath.Join(s.dir, "cg.out.*")) // cg.out.1, .2…: the highest is the latest
	latest, n := "", 0
	for _, d := range dumps {
		if k, err := strconv.Atoi(d[strings.LastIndex(d, ".")+1:]); err == nil && k > n {
			latest, n = d, k
		}
	}
	data, err := os.ReadFile(latest)
	if err != nil {
		return 0, err
	}
	m := callgrindTotals.FindSubmatch(data)
	if m == nil {
		return 0, fmt.Errorf("no totals in %s", latest)
	}
	return strconv.ParseInt(string(m[1]), 10, 64)
}

// instructions measures, for the ideal pair and each of dlock's types,
// the server's instructions (callgrind, user space, the whole process)
// per uncontended lock+unlock over pairs pairs, after a warm-up.
func instructions(ctx context.Context, pairs int) ([]instructionsResult, error) {
	ideal := func(ctx context.Context, rdb *redis.Client) func() error {
		return func() error {
			var b [16]byte
			_, _ = rand.Read(b[:])
			token := hex.EncodeToString(b[:])
			if err := rdb.SetNX(ctx, "bench:ideal", token, benchTTL).Err(); err != nil {
				return err
			}
			return compareAndDelete.Run(ctx, rdb, []string{"bench:ideal"}, token).Err()
		}
	}
	results := []instructionsResult{}
	res, err := measureInstructions(ctx, 1, pairs, func(nodes []*redis.Client) (func() error, error) { return ideal(ctx, nodes[0]), nil })
	if err != nil {
		return nil, fmt.Errorf("ideal: %w", err)
	}
	results = append(results, instructionsResult{"ideal", res})
	for _, typ := range lockTypes {
		res, err := measureInstructions(ctx, typ.servers, pairs, func(nodes []*redis.Client) (func() error, error) {
			rdb := nodes[0]
			if typ.restricted {
				var err error
				if rdb, err = restrictedClient(ctx, rdb); err != nil {
					return nil, err
				}
			}
			c, err := dlock.New(rdb, dlock.WithTTL(benchTTL))
			if err != nil {
				return nil, err
			}
			var r *dlock.Redlock
			if len(nodes) > 1 {
				var universal []redis.UniversalClient
				for _, n := range nodes {
					universal = append(universal, n)
				}
				if r, err = newRedlock(universal, dlock.WithTTL(benchTTL), dlock.WithRestartGuard(0)); err != nil { // fresh servers
					return nil, err
				}
			}
			return func() error {
				lease, err := typ.lock(ctx, c, r)
				if err != nil {
					return err
				}
				return lease.Unlock(ctx)
			}, nil
		})
		if err != nil {
			return results, fmt.Errorf("%s: %w", typ.name, err)
		}
		results = append(results, instructionsResult{typ.name, res})
	}
	return results, nil
}

// measureInstructions starts servers under callgrind, makes a pair on them
// with open, and counts the servers' instructions per pair, per node.
func measureInstructions(ctx context.Context, servers, pairs int, open func([]*redis.Client) (func() error, error)) (int64, error) {
	var nodes []*redis.Client
	var cgs []*callgrindServer
	defer func() {
		for i := range cgs {
			_ = nodes[i].Close()
			cgs[i].close()
		}
	}()
	for range servers {
		s, err := startCallgrind()
		if err != nil {
			return 0, err
		}
		cgs = append(cgs, s)
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: s.addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute}))
	}
	pair, err := open(nodes)
	if err != nil {
		return 0, err
	}
	for range 50 { // scripts loaded, rights known, connections made
		if err := pair(); err != nil {
			return 0, err
		}
	}
	for _, s := range cgs {
		if _, err := s.control("-z"); err != nil {
			return 0, err
		}
	}
	for range pairs {
		if err := pair(); err != nil {
			return 0, err
		}
	}
	var total int64
	for _, s := range cgs {
		n, err := s.control("-d")
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total / int64(pairs*servers), nil
}

// instructionsBeside is instructions, with the -before binary's (spec
// LABEL=BINARY) run of -instructions made just before, as a table.
func instructionsBeside(ctx context.Context, pairs int, spec string) (string, error) {
	var before []instructionsResult
	label := ""
	if spec != "" {
		var bin string
		var ok bool
		if label, bin, ok = strings.Cut(spec, "="); !ok {
			return "", fmt.Errorf("-before %q: want LABEL=BINARY", spec)
		}
		fmt.Fprintf(os.Stderr, "instructions at %s\n", label)
		cmd := exec.CommandContext(ctx, bin, "-instructions", "-json", "-pairs", strconv.Itoa(pairs))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("-before %s: %w", label, err)
		}
		if err := json.Unmarshal(out, &before); err != nil {
			return "", fmt.Errorf("-before %s: %w", label, err)
		}
	}
	rows, err := instructions(ctx, pairs)
	var b strings.Builder
	fmt.Fprintf(&b, "Server instructions per uncontended lock+unlock (callgrind, user space, per node for a Redlock), %d pairs, %s on %s: deterministic, where timings on a shared machine are not.\n\n",
		pairs, time.Now().UTC().Format("2006-01-02"), machine())
	if label == "" {
		b.WriteString("| type | instructions |\n|---|---|\n")
	} else {
		fmt.Fprintf(&b, "| type | %s | now | now / %s |\n|---|---|---|---|\n", label, label)
	}
	for _, r := range rows {
		if label == "" {
			fmt.Fprintf(&b, "| %s | %d |\n", r.Name, r.Instructions)
			continue
		}
		was := "—" // a row the earlier harness did not measure
		ratio := "—"
		for _, o := range before {
			if o.Name == r.Name {
				was = strconv.FormatInt(o.Instructions, 10)
				ratio = fmt.Sprintf("%.2f", float64(r.Instructions)/float64(o.Instructions))
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s |\n", r.Name, was, r.Instructions, ratio)
	}
	for _, r := range rows {
		if base, _, ok := strings.Cut(r.Name, ", the README's ACL user"); ok {
			for _, d := range rows {
				if d.Name == base {
					fmt.Fprintf(&b, "\n%s as the README's ACL user: %.2f× the default user's.\n", base, float64(r.Instructions)/float64(d.Instructions))
				}
			}
		}
	}
	return b.String(), err
}

// newRedlock calls dlock.NewRedlock through reflection, so that this
// harness builds against afbd945 too, whose NewRedlock returned no error.
func newRedlock(clients []redis.UniversalClient, opts ...dlock.Option) (*dlock.Redlock, error) {
	out := reflect.ValueOf(dlock.NewRedlock).CallSlice([]reflect.Value{reflect.ValueOf(clients), reflect.ValueOf(opts)})
	if len(out) == 2 && !out[1].IsNil() {
		return nil, out[1].Interface().(error)
	}
	return out[0].Interface().(*dlock.Redlock), nil
}
