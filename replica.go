package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/fcall"
)

// replicaAck is [WithReplicaAck]'s rule: how many replicas must confirm a
// write a lease counts on, and how long WAIT waits; n == 0: none.
type replicaAck struct {
	n       int
	timeout time.Duration
}

// judge reads WAIT's reply (nil: none to judge). It returns nil when n
// replicas confirmed, else an error matching [ErrReplicaAck] (or
// [ErrPermission] without +wait).
func (ack replicaAck) judge(acks *redis.Cmd) error {
	if acks == nil {
		return nil
	}
	got, err := acks.Int64()
	switch {
	case isPermission(acks.Err()):
		return fmt.Errorf("%w: WAIT: %w", ErrPermission, err)
	case acks.Err() != nil:
		return fmt.Errorf("%w: WAIT: %w", ErrReplicaAck, err)
	case err != nil || got < int64(ack.n):
		return fmt.Errorf("%w: %d of %d within %v", ErrReplicaAck, got, ack.n, ack.timeout)
	}
	return nil
}

// acquireAcknowledged runs an acquire with WAIT, on its first key's master.
func (c *Client) acquireAcknowledged(ctx context.Context, ack replicaAck, script *redis.Script, argv []any) (*redis.Cmd, error) {
	master, err := fcall.MasterFor(ctx, c.rdb, argv[3].(string))
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd, nil
	}
	return c.sendAcknowledged(ctx, ack, master, false, script, argv)
}

// sendAcknowledged runs one script's command with WAIT after it on master,
// following a cluster's MOVED and ASK (asking: after an ASK), and returns
// a shortfall of acknowledgements as an error matching [ErrReplicaAck],
// for the caller to judge once it knows the script wrote something.
func (c *Client) sendAcknowledged(ctx context.Context, ack replicaAck, master redis.UniversalClient, asking bool,
	script *redis.Script, argv []any) (*redis.Cmd, error) {
	cmd, acks := fcall.SendAcknowledged(ctx, &c.fns, c.rdb, master, asking, ack.n, ack.timeout, script, argv)
	return cmd, ack.judge(acks)
}
