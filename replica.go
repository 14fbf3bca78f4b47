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
	case fcall.IsPermission(acks.Err()):
		return fmt.Errorf("%w: WAIT: %w", ErrPermission, err)
	case acks.Err() != nil:
		return fmt.Errorf("%w: WAIT: %w", ErrReplicaAck, err)
	case err != nil || got < int64(ack.n):
		return fmt.Errorf("%w: %d of %d within %v", ErrReplicaAck, got, ack.n, ack.timeout)
	}
	return nil
}

// sendAcknowledged sends calls, for keys of one master, to c's Redis, with
// WAIT after them if ack.n > 0 (fcall.SendAcknowledged follows MOVED and
// ASK). It returns each call's WAIT as judge reads it (nil without WAIT),
// for the caller to heed once it knows the script wrote something.
func (c *Client) sendAcknowledged(ctx context.Context, ack replicaAck, calls []fcall.Call) []error {
	if ack.n == 0 {
		fcall.Send(ctx, &c.fns, c.rdb, calls)
		return nil
	}
	acks := make([]error, len(calls))
	for i, wait := range fcall.SendAcknowledged(ctx, &c.fns, c.rdb, calls, ack.n, ack.timeout) {
		acks[i] = ack.judge(wait)
	}
	return acks
}
