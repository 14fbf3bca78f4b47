package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

const doctorUsage = `Usage: dlock doctor [--json] [--prefix PREFIX]

Is this Redis safe and fit for dlock's locks? Runs each check below on the
Redis at --redis (else REDIS_URL), on every master of a cluster, and gives
a verdict with the reason: pass; warn (a guarantee is weaker than it could
be, or could not be confirmed); fail (locks are unsafe there, or will not
work).

  maxmemory-policy  noeviction, so that Redis never evicts a held lock; a
                    policy doctor cannot read (no +info) fails
  persistence       what a restart loses: AOF (appendonly, appendfsync) and
                    RDB snapshots (save); only appendfsync always keeps every lock
  replication       replicas and min-replicas-to-write: a failover can promote
                    a replica that never received an acquisition
  cluster           every one of the 16384 slots served, and cluster_state ok,
                    as each master sees it
  version           the Redis version and the wake-ups dlock uses there
                    (SPUBLISH, sharded pub/sub, on a Redis 7 cluster)
  rights            the ACL rights dlock needs, tried for real: a lock of each
                    type taken and released, and a wake-up published to a
                    subscriber, on scratch names under PREFIX; a missing right
                    fails with Redis's NOPERM message
  round-trip        PING's round trip: every acquire and release waits for one
  clock             the server's clock (TIME) against this host's

The scratch keys (PREFIXdoctor-…:) are deleted after; for a user not
granted SCAN, all but a few marks that expire within a minute. Give the
prefix your programs use (WithPrefix), so that the rights tried are those
its ACL key and channel patterns grant.

Examples:
  dlock doctor
  dlock doctor --redis redis://locks:secret@redis.internal:6379
  dlock doctor --redis redis://10.0.0.1:7000,10.0.0.2:7000   # a cluster
  dlock doctor --json | jq -r '.checks[] | select(.verdict != "pass") | "\(.name): \(.reason)"'

Exit codes:
  0    every check passed (warnings allowed)
  1    a check failed
  2    bad flags or a Redis URL dlock cannot use
  69   Redis could not be reached
  77   Redis refused the login (user, password)
`

// doctorTimeout bounds each check, so that a server that stops answering
// half way fails the checks it stalls rather than hanging doctor.
const doctorTimeout = 10 * time.Second

// verdict is a check's outcome. Greater is worse.
type verdict int

const (
	pass verdict = iota
	warn
	fail
)

func (v verdict) String() string {
	return [...]string{"pass", "warn", "fail"}[v]
}

// doctorJSON is what doctor --json prints.
type doctorJSON struct {
	Redis   string        `json:"redis"`   // the addresses given
	Masters []string      `json:"masters"` // the masters checked
	Cluster bool          `json:"cluster"`
	Verdict string        `json:"verdict"` // the worst of the checks'
	Checks  []doctorCheck `json:"checks"`  // in the order of doctorUsage
}

// doctorCheck is one check's outcome.
type doctorCheck struct {
	Name    string `json:"name"`
	Verdict string `json:"verdict"` // "pass", "warn" or "fail"
	Reason  string `json:"reason"`
}

func defineDoctor(fs *flag.FlagSet) action {
	redisFlag := fs.String("redis", "", redisFlagUsage)
	asJSON := fs.Bool("json", false, "print the checks as JSON, for scripts")
	prefix := fs.String("prefix", dlock.DefaultPrefix, "the key `PREFIX` your programs use (WithPrefix): the rights check's scratch locks go under it")
	return func(ctx context.Context, fs *flag.FlagSet, out *output) int {
		switch {
		case fs.NArg() != 0:
			return usageError(out, "doctor", "takes no arguments")
		case *prefix == "":
			return usageError(out, "doctor", "--prefix must not be empty")
		}
		return doctor(ctx, *redisFlag, *prefix, *asJSON, out)
	}
}

// doctor runs every check on the Redis at flagValue (else REDIS_URL, else
// the default) and prints them.
func doctor(ctx context.Context, flagValue, prefix string, asJSON bool, out *output) int {
	url := redisURL(flagValue)
	if url == "" {
		url = defaultRedisURL
	}
	d, rdb, err := connect(ctx, url)
	if err != nil {
		fmt.Fprintf(out.stderr, "dlock doctor: %v\n", err)
		return exitCodeOf(ctx, err)
	}
	defer rdb.Close()
	nodes, err := mastersOf(ctx, rdb)
	if err == nil && len(nodes) == 0 {
		err = errors.New("no master serves a slot")
	}
	if err != nil {
		err = fmt.Errorf("listing the cluster's masters at %s: %w", d, err)
		fmt.Fprintf(out.stderr, "dlock doctor: %v\n", err)
		return exitCodeOf(ctx, err)
	}
	_, cluster := rdb.(*redis.ClusterClient)
	gatherFacts(ctx, nodes)

	checks := runChecks(ctx, rdb, nodes, cluster, prefix)
	report := doctorJSON{Redis: d.String(), Cluster: cluster, Checks: make([]doctorCheck, len(checks))}
	worst := pass
	for i, c := range checks {
		worst = max(worst, c.verdict)
		report.Checks[i] = doctorCheck{Name: c.name, Verdict: c.verdict.String(), Reason: c.reason}
	}
	for _, n := range nodes {
		report.Masters = append(report.Masters, n.addr)
	}
	report.Verdict = worst.String()
	if code, ok := signalExit(ctx); ok {
		return code
	}
	if asJSON {
		writeJSON(out.stdout, report)
	} else {
		printDoctor(out.stdout, report, checks)
	}
	if worst == fail {
		return exitFailure
	}
	return 0
}

// checkResult is a check's outcome as doctor works with it.
type checkResult struct {
	name    string
	verdict verdict
	reason  string
}

// runChecks runs the checks in the order doctorUsage lists them.
func runChecks(ctx context.Context, rdb redis.UniversalClient, nodes []*doctorNode, cluster bool, prefix string) []checkResult {
	policyCtx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	return []checkResult{
		maxmemoryCheck(policyCtx, rdb, nodes),
		combine("persistence", nodes, persistenceOf),
		combine("replication", nodes, replicationOf),
		combine("cluster", nodes, func(n *doctorNode) (verdict, string) { return clusterOf(n, cluster) }),
		versionCheck(nodes, cluster),
		rightsCheck(ctx, rdb, prefix, shardedPubSub(nodes, cluster)), // bounded part by part
		roundTripCheck(nodes),
		clockCheck(nodes),
	}
}

// combine makes one check of a check run on each master: its worst
// verdict, with the reason where all agree, else each worst node's.
func combine(name string, nodes []*doctorNode, check func(n *doctorNode) (verdict, string)) checkResult {
	type nodeResult struct {
		addr    string
		verdict verdict
		reason  string
	}
	results := make([]nodeResult, len(nodes))
	worst := pass
	for i, n := range nodes {
		v, reason := check(n)
		results[i] = nodeResult{n.addr, v, reason}
		worst = max(worst, v)
	}
	same := true
	for _, r := range results[1:] {
		same = same && r.reason == results[0].reason
	}
	switch {
	case len(results) == 1:
		return checkResult{name, worst, results[0].reason}
	case same:
		return checkResult{name, worst, results[0].reason + fmt.Sprintf(" (all %d masters)", len(results))}
	}
	var reasons []string
	for _, r := range results {
		if r.verdict == worst {
			reasons = append(reasons, r.addr+": "+r.reason)
		}
	}
	return checkResult{name, worst, strings.Join(reasons, "; ")}
}

// printDoctor prints the report for people: a line per check, then the
// verdict.
func printDoctor(w io.Writer, report doctorJSON, checks []checkResult) {
	kind := "standalone"
	if report.Cluster {
		kind = fmt.Sprintf("cluster of %d masters", len(report.Masters))
	}
	fmt.Fprintf(w, "dlock doctor: Redis at %s (%s)\n\n", report.Redis, kind)
	count := map[verdict]int{}
	for _, c := range checks {
		count[c.verdict]++
		fmt.Fprintf(w, "%s  %-16s  %s\n", c.verdict, c.name, wrap(c.reason, reasonIndent, reasonWidth))
	}
	fmt.Fprintln(w)
	switch {
	case count[fail] > 0:
		fmt.Fprintf(w, "NOT fit for locks: %s failed, %s\n", plural(count[fail], "check"), plural(count[warn], "warning"))
	case count[warn] > 0:
		fmt.Fprintf(w, "fit for locks, with %s\n", plural(count[warn], "warning"))
	default:
		fmt.Fprintln(w, "fit for locks: every check passed")
	}
}

// How printDoctor lays reasons out: after the verdict and the check's
// name, wrapped to fit a terminal of 100 columns.
const (
	reasonIndent = len("pass  maxmemory-policy  ")
	reasonWidth  = 100 - reasonIndent
)

// wrap breaks text into lines of at most width (a longer word has a line
// of its own), each after the first indented by indent spaces.
func wrap(text string, indent, width int) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(text) {
		switch {
		case i == 0:
		case line+1+len(word) > width:
			b.WriteString("\n" + strings.Repeat(" ", indent))
			line = 0
		default:
			b.WriteByte(' ')
			line++
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// doctorNode is one master and what doctor learnt of it.
type doctorNode struct {
	addr    string
	rdb     *redis.Client
	cluster bool // a node of a cluster

	info    map[string]string // INFO's fields; nil when it could not be read
	infoErr error
	config  map[string]string // CONFIG GET's answers, by parameter; missing when refused
	slots   []redis.ClusterSlot
	slotErr error
	state   string // CLUSTER INFO's cluster_state; "" when refused
	version string // from INFO, else HELLO; "" when neither answered

	rtt     time.Duration // PING's median round trip
	pingErr error
	offset  time.Duration // the server's clock minus this host's
	timeErr error
}

// mastersOf lists the masters rdb reaches: a cluster's every master, else
// the one server.
func mastersOf(ctx context.Context, rdb redis.UniversalClient) ([]*doctorNode, error) {
	cluster, ok := rdb.(*redis.ClusterClient)
	if !ok {
		c := rdb.(*redis.Client) // connect makes one or the other
		return []*doctorNode{{addr: c.Options().Addr, rdb: c}}, nil
	}
	var mu sync.Mutex
	var nodes []*doctorNode
	err := cluster.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, &doctorNode{addr: c.Options().Addr, rdb: c, cluster: true})
		return nil
	})
	slices.SortFunc(nodes, func(a, b *doctorNode) int { return strings.Compare(a.addr, b.addr) })
	return nodes, err
}

// gatherFacts asks every node, at once, what the per-node checks read.
func gatherFacts(ctx context.Context, nodes []*doctorNode) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
			defer cancel()
			n.gather(ctx)
		})
	}
	wg.Wait()
}

// pings is how many PINGs the round trip is the median of.
const pings = 5

func (n *doctorNode) gather(ctx context.Context) {
	info, err := n.rdb.Info(ctx).Result() // the default sections: server, memory, persistence, replication, cluster…
	if err == nil {
		n.info = parseInfo(info)
		n.version = n.info["redis_version"]
	}
	n.infoErr = err
	if n.version == "" {
		n.version = helloVersion(ctx, n.rdb)
	}
	n.config = map[string]string{}
	for _, param := range []string{"save", "appendfsync", "min-replicas-to-write", "min-replicas-max-lag"} {
		if values, err := n.rdb.ConfigGet(ctx, param).Result(); err == nil {
			if v, ok := values[param]; ok {
				n.config[param] = v
			}
		}
	}
	if n.cluster {
		n.slots, n.slotErr = n.rdb.ClusterSlots(ctx).Result()
		if info, err := n.rdb.ClusterInfo(ctx).Result(); err == nil { // refused to the README's cluster user
			n.state = parseInfo(info)["cluster_state"]
		}
	}
	var rtts []time.Duration
	for range pings {
		start := time.Now()
		if n.pingErr = n.rdb.Ping(ctx).Err(); n.pingErr != nil {
			break
		}
		rtts = append(rtts, time.Since(start))
	}
	if len(rtts) == pings {
		slices.Sort(rtts)
		n.rtt = rtts[pings/2]
	}
	before := time.Now()
	serverTime, err := n.rdb.Time(ctx).Result()
	after := time.Now()
	n.timeErr = err
	// The server read its clock somewhere in the round trip: in the middle,
	// give or take half of it.
	n.offset = serverTime.Sub(before.Add(after.Sub(before) / 2))
}

// parseInfo reads INFO's "field:value" lines.
func parseInfo(info string) map[string]string {
	fields := map[string]string{}
	for line := range strings.SplitSeq(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			fields[k] = v
		}
	}
	return fields
}

// helloVersion is the version HELLO tells, which needs no +info: RESP3's
// map, or RESP2's list of names and values.
func helloVersion(ctx context.Context, rdb *redis.Client) string {
	reply, err := rdb.Do(ctx, "HELLO").Result()
	if err != nil {
		return ""
	}
	switch r := reply.(type) {
	case map[any]any:
		v, _ := r["version"].(string)
		return v
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			if r[i] == "version" {
				v, _ := r[i+1].(string)
				return v
			}
		}
	}
	return ""
}

// quietLogger drops the log lines of doctor's own dlock Clients: what they
// would log, the checks report.
var quietLogger = slog.New(slog.DiscardHandler)
