package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/family"
	"github.com/dlockio/dlock/internal/scripts"
)

// scratchTTL is the TTL of the rights check's locks: short, so that what
// they leave behind (a fencing counter kept 10 of its TTLs, a
// release mark, a tombstone) expires within a minute where doctor may not
// delete it, and long enough for a slow server to confirm a hold.
const scratchTTL = 5 * time.Second

// rightsProbe is one thing dlock does, tried on scratch names.
type rightsProbe struct {
	what  string
	names []string // the lock names it writes
	try   func(ctx context.Context, c *dlock.Client) error
}

// takeAndRelease takes a lock with acquire and releases it.
func takeAndRelease(acquire func(ctx context.Context) (*dlock.Lease, error)) func(ctx context.Context, c *dlock.Client) error {
	return func(ctx context.Context, _ *dlock.Client) error {
		lease, err := acquire(ctx)
		if err != nil {
			return err
		}
		return lease.Unlock(ctx)
	}
}

// rightsProbes are a lock of each kind on a Client's server, each taken
// and released: between them, every command dlock's scripts run to take
// and release a lock. Each has a name of its kind's; a group three, in
// different slots of a cluster.
func rightsProbes(c *dlock.Client) []rightsProbe {
	var probes []rightsProbe
	for _, k := range family.All {
		if k.Redlock {
			continue
		}
		names := []string{strings.ReplaceAll(string(k.Kind), ".", "-")}
		if k.Group {
			names = []string{names[0] + "-a", names[0] + "-b", names[0] + "-c"}
		}
		take := k.Handle(family.Target{Client: c, Value: "dlock doctor"}, names)
		probes = append(probes, rightsProbe{k.Label(), names, takeAndRelease(func(ctx context.Context) (*dlock.Lease, error) {
			return take(ctx, true)
		})})
	}
	return probes
}

// rightsCheck runs rightsProbes, and a wake-up published to a subscriber,
// as the user doctor logged in as, under a scratch prefix inside prefix,
// then deletes what they left. Each part has doctorTimeout of its own.
func rightsCheck(ctx context.Context, rdb redis.UniversalClient, prefix string, sharded bool) checkResult {
	const name = "rights"
	var b [6]byte
	_, _ = rand.Read(b[:])
	scratch := prefix + "doctor-" + hex.EncodeToString(b[:]) + ":"
	client, err := dlock.New(rdb, dlock.WithPrefix(scratch), dlock.WithTTL(scratchTTL), dlock.WithLogger(quietLogger))
	if err != nil {
		return checkResult{name, fail, "cannot check: " + err.Error()}
	}
	var passed, failedLocks, names []string
	var lockErr error
	locksCtx, cancel := context.WithTimeout(ctx, doctorTimeout)
	for _, p := range rightsProbes(client) {
		names = append(names, p.names...)
		if lockErr != nil && !errors.Is(lockErr, dlock.ErrPermission) {
			// A server that refuses writes (READONLY, NOREPLICAS,
			// CLUSTERDOWN) or does not answer refuses every probe alike:
			// the first says why.
			continue
		}
		err := p.try(locksCtx, client)
		if err == nil {
			passed = append(passed, p.what)
			continue
		}
		failedLocks = append(failedLocks, p.what)
		if lockErr == nil {
			lockErr = err
		}
	}
	cancel()
	_ = client.Close()
	wakeUp := "PUBLISH to SUBSCRIBE"
	if sharded {
		wakeUp = "SPUBLISH to SSUBSCRIBE"
	}
	wakeCtx, cancel := context.WithTimeout(ctx, doctorTimeout)
	wakeErr := probeWakeUp(wakeCtx, rdb, scratch+"{wake}", sharded)
	cancel()
	// A command refused inside a script is not named by every Redis
	// (7.0: "The user executing the script can't run this command"): the
	// commands tried one by one name themselves.
	commandsCtx, cancel := context.WithTimeout(ctx, doctorTimeout)
	refused := probeCommands(commandsCtx, rdb, scratch+"{commands}")
	cancel()
	cleanup := cleanScratch(ctx, rdb, scratch, names)

	var failed []string
	if len(refused) > 0 {
		failed = append(failed, "commands refused: "+strings.Join(refused, "; "))
	}
	switch {
	case len(failedLocks) > 0 && errors.Is(lockErr, dlock.ErrPermission):
		failed = append(failed, fmt.Sprintf("could not take and release a %s (%v)", strings.Join(failedLocks, ", "), lockErr))
	case len(failedLocks) > 0:
		failed = append(failed, fmt.Sprintf("could not take and release a %s (%v), so the other types were not tried", failedLocks[0], lockErr))
	}
	if wakeErr != nil {
		failed = append(failed, "a wake-up by "+wakeUp+": "+wakeErr.Error())
	}
	if len(failed) > 0 {
		return checkResult{name, fail, strings.Join(failed, "; ") + "; " + cleanup}
	}
	return checkResult{name, pass, "took and released a " + strings.Join(passed, ", ") + "; a wake-up went by " +
		wakeUp + "; every command dlock's scripts run was allowed; " + cleanup}
}

// probeWakeUp subscribes to channel and publishes to it, as dlock's
// waiters and releases do, and waits for the message to arrive.
func probeWakeUp(ctx context.Context, rdb redis.UniversalClient, channel string, sharded bool) error {
	var sub *redis.PubSub
	if sharded {
		sub = rdb.SSubscribe(ctx, channel)
	} else {
		sub = rdb.Subscribe(ctx, channel)
	}
	defer sub.Close()
	timeout := doctorTimeout // ReceiveTimeout's reads heed no context
	if deadline, ok := ctx.Deadline(); ok {
		timeout = time.Until(deadline)
	}
	if _, err := sub.ReceiveTimeout(ctx, timeout); err != nil {
		return fmt.Errorf("subscribing: %w", err)
	}
	var err error
	if sharded {
		err = rdb.SPublish(ctx, channel, "dlock doctor").Err()
	} else {
		err = rdb.Publish(ctx, channel, "dlock doctor").Err()
	}
	if err != nil {
		return fmt.Errorf("publishing: %w", err)
	}
	if _, err := sub.ReceiveTimeout(ctx, timeout); err != nil {
		return fmt.Errorf("receiving the message published: %w", err)
	}
	return nil
}

// lockKeySuffixes are what follows a lock's key (PREFIX{name}) in the
// names of its other keys, for every type: those of the scripts that take
// a lock of any type (scripts.AnyLockLayout; channels among them, whose
// DEL finds nothing). Some have no expiry (an Election's leader), and a
// script refused half way by an ACL leaves what it wrote before the
// refusal (Redis does not roll a script back): cleanScratch deletes them
// by name, which needs no SCAN.
// TestDoctor_FindsWhatMakesAServerUnfitForLocks checks that nothing
// without an expiry is left.
var lockKeySuffixes = func() []string {
	suffixes := make([]string, len(scripts.AnyLockLayout))
	for i, key := range scripts.AnyLockLayout {
		suffixes[i] = key.Suffix
	}
	return suffixes
}()

// cleanScratch deletes the keys of the lock names under scratch, then
// every key under scratch on every master where the user may SCAN (what
// is left has secret names: tombstones and release marks, which expire
// within a minute). It says what became of them, for the check's reason.
func cleanScratch(ctx context.Context, rdb redis.UniversalClient, scratch string, names []string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sandboxCleanup)
	defer cancel()
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, name := range names {
			for _, suffix := range lockKeySuffixes {
				p.Del(ctx, scratch+"{"+name+"}"+suffix) // one DEL per key: a cluster's keys of one name share a slot, not the names
			}
		}
		return nil
	})
	if err != nil {
		return "scratch keys " + scratch + "* not deleted (" + err.Error() + ")"
	}
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		err = cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return deleteKeys(ctx, node, scratch)
		})
	} else {
		err = deleteKeys(ctx, rdb, scratch)
	}
	switch {
	case err == nil:
		return "scratch keys " + scratch + "* deleted"
	case isNoPerm(err):
		return "scratch keys " + scratch + "* deleted but marks that expire within a minute (the user may not SCAN)"
	}
	return "scratch keys " + scratch + "* deleted but marks that expire within a minute (" + err.Error() + ")"
}

// dlockCommands are the commands dlock's scripts run, each with arguments
// that do no harm to scratch keys made from base: "S", "H", "Z" and "N"
// stand for a string, a hash, a sorted set and a counter, in one slot.
// Every key written is given an expiry or emptied (which deletes it).
// TestDoctor_TriesEveryCommandTheScriptsRun keeps the list whole.
var dlockCommands = [][]string{
	{"get", "S"}, {"mget", "S", "N"}, {"set", "S", "1", "PX", "60000"}, {"exists", "S"}, {"pexpire", "S", "60000"},
	{"pexpireat", "S", "EXPIRY"}, {"pttl", "S"}, {"type", "S"}, {"time"},
	{"incr", "N"}, {"pexpire", "N", "60000"},
	{"hset", "H", "f", "1"}, {"pexpire", "H", "60000"}, {"hget", "H", "f"}, {"hmget", "H", "f"},
	{"hincrby", "H", "f", "1"}, {"hlen", "H"}, {"hdel", "H", "f"},
	{"zadd", "Z", "1", "m"}, {"pexpire", "Z", "60000"}, {"zscore", "Z", "m"}, {"zcard", "Z"},
	{"zcount", "Z", "-inf", "+inf"}, {"zrange", "Z", "0", "-1"}, {"zrangebyscore", "Z", "-inf", "+inf"},
	{"zrem", "Z", "m"}, {"zadd", "Z", "1", "m"}, {"zpopmin", "Z"}, {"zadd", "Z", "1", "m"},
	{"zremrangebyscore", "Z", "-inf", "+inf"},
	{"rename", "S", "S2"}, {"del", "S2", "N", "H", "Z"},
}

// probeCommands runs dlockCommands on keys under base and returns each
// command refused for want of a right, with Redis's reason.
func probeCommands(ctx context.Context, rdb redis.UniversalClient, base string) []string {
	keys := map[string]string{"S": base + ":s", "S2": base + ":s2", "H": base + ":h", "Z": base + ":z", "N": base + ":n",
		"EXPIRY": fmt.Sprint(time.Now().Add(time.Minute).UnixMilli())}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(dlockCommands))
	for i, command := range dlockCommands {
		args := make([]any, len(command))
		for j, word := range command {
			if key, ok := keys[word]; ok {
				word = key
			}
			args[j] = word
		}
		cmds[i] = pipe.Do(ctx, args...)
	}
	_, _ = pipe.Exec(ctx) // each command's own error is looked at
	var refused []string
	seen := map[string]bool{}
	for i, cmd := range cmds {
		name := dlockCommands[i][0]
		if err := cmd.Err(); refusedAccess(err) && !seen[name] {
			seen[name] = true
			refused = append(refused, name+" ("+err.Error()+")")
		}
	}
	return refused
}
