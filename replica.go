package dlock

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// runAcquire runs an acquire script on keys. With [WithReplicaAck], it
// sends WAIT after it in one pipeline on one connection to the keys' master,
// and reports a shortfall of replica acknowledgements as an error matching
// [ErrReplicaAck], for the caller to check once it knows the script granted
// a hold (a refusal needs no replicas).
func (c *Client) runAcquire(ctx context.Context, cfg settings, script *redis.Script, keys []string, args ...any) (*redis.Cmd, error) {
	if cfg.replicaAck == 0 {
		return c.scripts.run(ctx, script, keys, args...), nil
	}
	master, err := c.masterFor(ctx, keys[0])
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd, nil
	}
	cmd, acks := acquireThenWait(ctx, master, cfg, script, keys, args, false)
	if isNoScript(cmd.Err()) { // SCRIPT FLUSH or a restart: send the body
		cmd, acks = acquireThenWait(ctx, master, cfg, script, keys, args, true)
	}
	if cmd.Err() != nil {
		return cmd, nil
	}
	if err := acks.Err(); err != nil {
		return cmd, fmt.Errorf("%w: WAIT: %w", ErrReplicaAck, err)
	}
	if got, err := acks.Int64(); err != nil || got < int64(cfg.replicaAck) {
		return cmd, fmt.Errorf("%w: %d of %d within %v", ErrReplicaAck, got, cfg.replicaAck, cfg.replicaAckTimeout)
	}
	return cmd, nil
}

func acquireThenWait(ctx context.Context, master redis.Cmdable, cfg settings, script *redis.Script, keys []string,
	args []any, withBody bool) (*redis.Cmd, *redis.Cmd) {
	pipe := master.Pipeline()
	var cmd *redis.Cmd
	if withBody {
		cmd = script.Eval(ctx, pipe, keys, args...)
	} else {
		cmd = script.EvalSha(ctx, pipe, keys, args...)
	}
	acks := pipe.Do(ctx, "wait", cfg.replicaAck, max(cfg.replicaAckTimeout.Milliseconds(), 1))
	_, _ = pipe.Exec(ctx) // errors are read per command
	return cmd, acks
}

// masterFor is the client of the master that holds key: on a cluster its
// node's, so that WAIT follows the script on its connection; elsewhere the
// Client's own (a single server, or Sentinel's current master).
func (c *Client) masterFor(ctx context.Context, key string) (redis.Cmdable, error) {
	if cluster, ok := c.rdb.(*redis.ClusterClient); ok {
		return cluster.MasterForKey(ctx, key)
	}
	return c.rdb, nil
}
