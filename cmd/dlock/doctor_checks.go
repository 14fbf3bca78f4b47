package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
)

// The checks of doctor that read what each master says of itself. Each
// returns a verdict and the reason, for people: what was found, what it
// means for a lock, and what to do.

// maxmemoryCheck is Client.Check's finding on each master.
func maxmemoryCheck(ctx context.Context, rdb redis.UniversalClient, nodes []*doctorNode) checkResult {
	const name = "maxmemory-policy"
	client, err := dlock.New(rdb, dlock.WithLogger(quietLogger))
	if err != nil {
		return checkResult{name, fail, "cannot check: " + err.Error()}
	}
	defer client.Close()
	report, err := client.Check(ctx)
	if err != nil {
		return checkResult{name, fail, "cannot check: " + err.Error()}
	}
	problems := map[string][]admin.Problem{}
	for _, n := range report.Nodes {
		problems[n.Addr] = n.Problems
	}
	return combine(name, nodes, func(n *doctorNode) (verdict, string) {
		found, ok := problems[n.addr]
		if !ok {
			return warn, "not checked: the master was not among those Client.Check reached"
		}
		worst := pass
		var reasons []string
		for _, p := range found {
			v := warn
			// A policy doctor could not read is no pass: it may evict.
			if p.Severity >= admin.SeverityError || p.Check == admin.CheckInfo {
				v = fail
			}
			worst = max(worst, v)
			reasons = append(reasons, p.Reason)
		}
		if len(reasons) == 0 {
			return pass, "noeviction: a full Redis refuses writes rather than evict a held lock"
		}
		return worst, strings.Join(reasons, "; ")
	})
}

// noInfo is the reason of a check that needs INFO where INFO was refused.
func noInfo(n *doctorNode, what string) string {
	reason := "cannot read INFO: " + n.infoErr.Error() + "; " + what + " not checked"
	if isNoPerm(n.infoErr) {
		reason += " (grant the user +info)"
	}
	return reason
}

// persistenceOf says what a restart of the master loses (docs/SAFETY.md:
// only appendfsync always keeps every hold and fencing counter).
func persistenceOf(n *doctorNode) (verdict, string) {
	if n.info == nil {
		return warn, noInfo(n, "persistence")
	}
	const lost = "a lock it loses is free again after the restart while its holder works on " +
		"(fencing tokens still increase)"
	if n.info["aof_enabled"] == "1" {
		fsync, known := n.config["appendfsync"]
		switch {
		case fsync == "always":
			return pass, "appendonly yes, appendfsync always: a restart keeps every lock and fencing counter"
		case !known:
			return warn, "appendonly yes, appendfsync unknown (CONFIG GET refused): only appendfsync always " +
				"keeps every lock across a crash of the host"
		case fsync == "everysec":
			return warn, "appendonly yes, appendfsync everysec: a crash of the host (not of Redis alone) loses " +
				"up to a second of writes; " + lost + "; set appendfsync always where that matters"
		}
		return warn, "appendonly yes, appendfsync " + fsync + ": a crash of the host loses what the OS had not " +
			"written yet (up to ~30 s); " + lost + "; set appendfsync always where that matters"
	}
	save, known := n.config["save"]
	switch {
	case known && save == "":
		return warn, "no AOF and no RDB snapshots: a restart loses every lock and fencing counter; " +
			lost + "; set appendonly yes and appendfsync always where that matters"
	case known:
		return warn, "no AOF; RDB snapshots (save " + strconv.Quote(save) + "): a restart loses what changed " +
			"since the last snapshot; " + lost + "; set appendonly yes and appendfsync always where that matters"
	}
	return warn, "no AOF; RDB snapshots unknown (CONFIG GET refused): a restart loses at least what changed " +
		"since the last snapshot; " + lost
}

// replicationOf says what a failover of the master can lose, and whether
// min-replicas-to-write stops its writes now.
func replicationOf(n *doctorNode) (verdict, string) {
	if n.info == nil {
		return warn, noInfo(n, "replication")
	}
	if n.info["role"] == "slave" {
		return fail, fmt.Sprintf("this server is a replica (of %s:%s): it refuses every write, so no lock can "+
			"be taken; give dlock the master", n.info["master_host"], n.info["master_port"])
	}
	replicas, _ := strconv.Atoi(n.info["connected_slaves"])
	// INFO shows min_slaves_good_slaves only when min-replicas-to-write is
	// set, so it says that much even where CONFIG GET is refused.
	good, goodShown := n.info["min_slaves_good_slaves"]
	goodCount, _ := strconv.Atoi(good)
	minimum, minKnown := n.config["min-replicas-to-write"]
	minCount, _ := strconv.Atoi(minimum)
	if !minKnown && goodShown {
		minimum, minCount = "(set; its value unknown: CONFIG GET refused)", 1
	}
	if minCount > 0 && goodShown && goodCount < minCount {
		return fail, fmt.Sprintf("min-replicas-to-write %s but %s within min-replicas-max-lag: Redis refuses "+
			"every write (NOREPLICAS), so no lock can be taken", minimum, plural(goodCount, "replica"))
	}
	switch {
	case replicas == 0:
		return pass, "no replicas: no failover can promote a server that missed an acquisition (and while this " +
			"one is down, no lock can be taken)"
	case minCount == 0:
		return warn, fmt.Sprintf("%s, min-replicas-to-write 0: replication is asynchronous, so a "+
			"failover can promote a replica that never received an acquisition, and a second owner enters; "+
			"programs that must survive one use WithReplicaAck, and min-replicas-to-write stops writes "+
			"while replicas are missing", plural(replicas, "replica"))
	}
	return pass, fmt.Sprintf("%s, min-replicas-to-write %s: writes stop while too few replicas keep up; a "+
		"failover can still lose the acquisitions of the last moments unless programs use WithReplicaAck",
		plural(replicas, "replica"), minimum)
}

// clusterSlots is how many hash slots a cluster has.
const clusterSlots = 16384

// clusterOf says whether the master sees every slot served.
func clusterOf(n *doctorNode, cluster bool) (verdict, string) {
	if !cluster {
		return pass, "not a cluster"
	}
	if n.slotErr != nil {
		return warn, "cannot read CLUSTER SLOTS: " + n.slotErr.Error() + "; slot coverage not checked"
	}
	covered := make([]bool, clusterSlots)
	masters := map[string]bool{}
	for _, s := range n.slots {
		for slot := max(s.Start, 0); slot <= min(s.End, clusterSlots-1); slot++ {
			covered[slot] = true
		}
		if len(s.Nodes) > 0 {
			masters[s.Nodes[0].Addr] = true
		}
	}
	var problems []string
	if gaps := uncovered(covered); gaps != "" {
		problems = append(problems, "slots "+gaps+" served by no master: a lock whose name hashes there "+
			"cannot be taken, and a cluster requiring full coverage refuses every command (CLUSTERDOWN)")
	}
	if n.state != "" && n.state != "ok" {
		problems = append(problems, "cluster_state "+n.state+": the node refuses commands (CLUSTERDOWN)")
	}
	if len(problems) > 0 {
		return fail, strings.Join(problems, "; ")
	}
	state := "cluster_state ok"
	if n.state == "" {
		state = "cluster_state not read (CLUSTER INFO refused)"
	}
	return pass, fmt.Sprintf("all %d slots served by %d masters, %s", clusterSlots, len(masters), state)
}

// uncovered lists the slots not covered as ranges ("42, 100-200"), the
// first few of them; "" when there is none.
func uncovered(covered []bool) string {
	const shown = 5
	var ranges []string
	more := 0
	for slot := 0; slot < len(covered); slot++ {
		if covered[slot] {
			continue
		}
		end := slot
		for end+1 < len(covered) && !covered[end+1] {
			end++
		}
		switch {
		case len(ranges) == shown:
			more++
		case end == slot:
			ranges = append(ranges, strconv.Itoa(slot))
		default:
			ranges = append(ranges, fmt.Sprintf("%d-%d", slot, end))
		}
		slot = end
	}
	if more > 0 {
		ranges = append(ranges, fmt.Sprintf("and %d ranges more", more))
	}
	return strings.Join(ranges, ", ")
}

func majorOf(version string) int {
	major, _, _ := strings.Cut(version, ".")
	n, _ := strconv.Atoi(major)
	return n
}

// versionCheck names the Redis version and the wake-ups dlock uses on it:
// SPUBLISH on a Redis 7 cluster (a message stays on its lock's shard),
// PUBLISH elsewhere (a cluster before 7 broadcasts it to every node).
func versionCheck(nodes []*doctorNode, cluster bool) checkResult {
	const name = "version"
	var versions, unknown []string
	for _, n := range nodes {
		if n.version == "" {
			unknown = append(unknown, n.addr)
		} else if !slices.Contains(versions, n.version) {
			versions = append(versions, n.version)
		}
	}
	switch {
	case len(unknown) > 0:
		return checkResult{name, warn, "cannot read the version (INFO and HELLO refused) of " + strings.Join(unknown, ", ")}
	case !cluster:
		return checkResult{name, pass, "Redis " + versions[0] + ": wake-ups by PUBLISH and SUBSCRIBE"}
	case len(versions) > 1:
		return checkResult{name, warn, "the masters run different versions (" + strings.Join(versions, ", ") + "): " +
			"dlock picks SPUBLISH or PUBLISH by the version of whichever it asks; finish the upgrade"}
	case majorOf(versions[0]) >= 7:
		return checkResult{name, pass, "Redis " + versions[0] + " on every master: wake-ups by SPUBLISH and " +
			"SSUBSCRIBE (sharded pub/sub), each on its lock's shard"}
	}
	return checkResult{name, warn, "Redis " + versions[0] + ": no sharded pub/sub before Redis 7, so wake-ups go " +
		"by PUBLISH, which a cluster broadcasts to every node; traffic grows with the cluster"}
}

// shardedPubSub is whether dlock's wake-ups go by SPUBLISH on these masters.
func shardedPubSub(nodes []*doctorNode, cluster bool) bool {
	if !cluster {
		return false
	}
	for _, n := range nodes {
		if majorOf(n.version) < 7 {
			return false
		}
	}
	return true
}

// Round trips doctor warns about, and fails.
const (
	// slowRoundTrip: each acquire, release and renewal waits for one, and a
	// hand-over for two; a lock held for milliseconds spends most of its
	// time on the way.
	slowRoundTrip = 100 * time.Millisecond
	// tooSlowRoundTrip is the default TTL's renewal interval: a renewal
	// would not be confirmed before the next is due.
	tooSlowRoundTrip = dlock.DefaultTTL / 3
)

// roundTripCheck reports the slowest master's round trip.
func roundTripCheck(nodes []*doctorNode) checkResult {
	const name = "round-trip"
	var slowest *doctorNode
	for _, n := range nodes {
		if n.pingErr != nil {
			return checkResult{name, fail, "PING failed on " + n.addr + ": " + n.pingErr.Error()}
		}
		if slowest == nil || n.rtt > slowest.rtt {
			slowest = n
		}
	}
	reason := fmt.Sprintf("%s (median of %d PINGs", millis(slowest.rtt), pings)
	if len(nodes) > 1 {
		reason += ", slowest master " + slowest.addr
	}
	reason += ")"
	switch {
	case slowest.rtt >= tooSlowRoundTrip:
		return checkResult{name, fail, reason + ": longer than the default TTL's renewal interval (" +
			tooSlowRoundTrip.String() + "); leases would be lost"}
	case slowest.rtt >= slowRoundTrip:
		return checkResult{name, warn, reason + ": every acquire, release and renewal waits for it, and a hand-over for two"}
	}
	return checkResult{name, pass, reason}
}

// clockDifference is how far apart the server's clock and this host's may
// be before doctor warns.
const clockDifference = time.Second

// clockCheck compares each master's TIME with this host's clock.
func clockCheck(nodes []*doctorNode) checkResult {
	const name = "clock"
	var furthest *doctorNode
	for _, n := range nodes {
		if n.timeErr != nil {
			return checkResult{name, warn, "cannot read TIME on " + n.addr + ": " + n.timeErr.Error()}
		}
		if furthest == nil || n.offset.Abs() > furthest.offset.Abs() {
			furthest = n
		}
	}
	side := "ahead of"
	if furthest.offset < 0 {
		side = "behind"
	}
	reason := fmt.Sprintf("the server's clock is %s %s this host's (±%s)", millis(furthest.offset.Abs()), side, millis(furthest.rtt/2))
	if len(nodes) > 1 {
		reason = furthest.addr + ": " + reason
	}
	if furthest.offset.Abs()-furthest.rtt/2 > clockDifference {
		return checkResult{name, warn, reason + ": one of the two is not synchronised (NTP). Redis times each lock " +
			"on its own clock, so a step of the server's clock forward ends locks early and lets a second owner in"}
	}
	return checkResult{name, pass, reason}
}

// millis is d in milliseconds, to a tenth; in µs below a millisecond.
func millis(d time.Duration) string {
	if d < time.Millisecond {
		return strconv.FormatInt(d.Microseconds(), 10) + " µs"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}
