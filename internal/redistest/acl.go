package redistest

import "slices"

// DlockACL is what dlock needs to lock on a single server: its keys and
// channels under the default prefix, and the commands it and its scripts
// run (EvalshaACL: without Functions). A cluster adds more (ClusterACL),
// WithReplicaAck wait, a Redlock info (RedlockACL).
var DlockACL = []string{
	"resetkeys", "~dlock:*", "resetchannels", "&dlock:*", "-@all",
	"+fcall", "+function|load", "+evalsha", "+script|load",
	"+get", "+mget", "+set", "+del", "+exists", "+incr", "+pexpire", "+pexpireat", "+pttl", "+time", "+type", "+rename",
	"+hdel", "+hget", "+hincrby", "+hlen", "+hmget", "+hset",
	"+zadd", "+zcard", "+zcount", "+zpopmin", "+zrange", "+zrangebyscore", "+zrem", "+zremrangebyscore", "+zscore",
	"+publish", "+subscribe", "+unsubscribe", "+ping", "+hello",
}

// EvalshaACL is DlockACL without Functions: dlock's rights before them.
var EvalshaACL = slices.DeleteFunc(slices.Clone(DlockACL), func(r string) bool { return r == "+fcall" || r == "+function|load" })

// RedlockACL is DlockACL with what a Redlock's restart guard adds.
var RedlockACL = slices.Concat(DlockACL, []string{"+info"})

// UserArgs are the redis-server arguments that create user, with password
// and rules, at start (and at every restart).
func UserArgs(user, password string, rules []string) []string {
	return append([]string{"--user", user, "on", ">" + password}, rules...)
}

// ClusterACL is DlockACL with what a cluster adds: sharded pub/sub, INFO,
// and for go-redis's cluster client CLUSTER SLOTS (the layout), ASKING
// (following a slot being migrated) and COMMAND (which commands only read;
// without it go-redis logs a refusal).
var ClusterACL = slices.Concat(DlockACL, []string{
	"+spublish", "+ssubscribe", "+sunsubscribe", "+info", "+cluster|slots", "+asking", "+command"})
