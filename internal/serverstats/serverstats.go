// Package serverstats reads what Redis servers report about their own work.
package serverstats

import (
	"context"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Commands sums [Calls] on the servers behind rdb (a cluster's masters).
func Commands(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		var total atomic.Int64
		err := cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			n, err := Commands(ctx, node)
			total.Add(n)
			return err
		})
		return total.Load(), err
	}
	calls, err := Calls(ctx, rdb)
	var total int64
	for _, n := range calls {
		total += n
	}
	return total, err
}

// Calls is how many times a standalone server has run each command (by its
// lower-case name, as INFO commandstats gives it), counting commands run
// inside scripts and leaving out INFO itself.
func Calls(ctx context.Context, rdb redis.UniversalClient) (map[string]int64, error) {
	stats, err := info(ctx, rdb, "commandstats")
	calls := make(map[string]int64)
	for name, stat := range stats { // none on an error
		if cmd, ok := strings.CutPrefix(name, "cmdstat_"); ok && cmd != "info" {
			calls[cmd], _ = strconv.ParseInt(strings.TrimPrefix(strings.SplitN(stat, ",", 2)[0], "calls="), 10, 64)
		}
	}
	return calls, err
}

// Field reads one numeric field of an INFO section of a standalone server
// (INFO stats's total_reads_processed, say); 0 when it is missing.
func Field(ctx context.Context, rdb *redis.Client, section, field string) (float64, error) {
	fields, err := info(ctx, rdb, section)
	if v, ok := fields[field]; ok { // none on an error
		return strconv.ParseFloat(v, 64)
	}
	return 0, err
}

// CPU is a standalone server's CPU time used, system and user, in seconds.
func CPU(ctx context.Context, rdb *redis.Client) (float64, error) {
	fields, err := info(ctx, rdb, "cpu")
	sys, _ := strconv.ParseFloat(fields["used_cpu_sys"], 64)
	user, _ := strconv.ParseFloat(fields["used_cpu_user"], 64)
	return sys + user, err
}

// CommandStat reads one field (calls, usec, usec_per_call) of cmd's line
// of a standalone server's INFO commandstats; 0 when cmd has not run.
func CommandStat(ctx context.Context, rdb *redis.Client, cmd, field string) (float64, error) {
	stats, err := info(ctx, rdb, "commandstats")
	for f := range strings.SplitSeq(stats["cmdstat_"+cmd], ",") {
		if name, value, _ := strings.Cut(f, "="); name == field { // none on an error
			return strconv.ParseFloat(value, 64)
		}
	}
	return 0, err
}

// info is an INFO section of a standalone server, by field.
func info(ctx context.Context, rdb redis.UniversalClient, section string) (map[string]string, error) {
	sections, err := rdb.InfoMap(ctx, section).Result()
	fields := make(map[string]string)
	for _, s := range sections {
		maps.Copy(fields, s)
	}
	return fields, err
}
