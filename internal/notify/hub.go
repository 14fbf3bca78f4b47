// Package notify turns Redis pub/sub messages into wake-ups for goroutines
// waiting on a lock.
//
// A Hub keeps one subscriber connection per shard (per master on a Redis 7
// cluster) and hands each message to this process's waiters on that
// channel: a waiter's id wakes that waiter, keeping what follows a colon
// for it ([Waiter.Grant]); "*" wakes them all.
//
// The contract with a waiter is what makes wake-ups lossless: [Hub.Watch]
// returns only once Redis has confirmed the subscription, so a waiter that
// watches, then tries the lock and fails, cannot miss the release that follows
// its try. Where the subscription cannot be had or breaks, Watch still
// returns (the waiter is then woken on nothing and must bound its waits by the
// holder's TTL, which it does anyway); nothing here ever blocks a waiter for
// good.
package notify

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// WakeAll is the payload that wakes every waiter on a channel (a writer
// left: all readers may enter). Any other payload is the id of the one
// waiter to wake, with anything for it after a colon.
const WakeAll = "*"

// subscribeTimeout bounds how long Watch waits for Redis to confirm a
// subscription before letting the waiter go on without wake-ups.
const subscribeTimeout = 2 * time.Second

// DefaultLinger is how long a channel stays subscribed after its last waiter
// left.
const DefaultLinger = 10 * time.Second

// Config says how a Hub reaches Redis.
type Config struct {
	Client redis.UniversalClient
	// Sharded makes the hub use SSUBSCRIBE on the master owning each channel's
	// slot; set it for a Redis 7 cluster, whose release scripts use SPUBLISH.
	Sharded bool
	Logger  *slog.Logger
	// Linger is how long a channel stays subscribed after its last waiter
	// left (default DefaultLinger): contended locks are waited on again and
	// again, and each subscription kept saves a round trip.
	Linger time.Duration
}

// Hub is the process-wide subscriber of one dlock client; call [New]. It
// starts a goroutine per shard on first use and stops it once the shard
// has no channel left; [Hub.Close] stops them all.
type Hub struct {
	cfg Config

	ctx    context.Context // cancelled by Close; used for the hub's own I/O
	cancel context.CancelFunc

	mu     sync.Mutex
	shards map[string]*shard // by node address; "" when not sharded
	closed bool
	wg     sync.WaitGroup
}

// New returns a Hub that subscribes through cfg.Client.
func New(cfg Config) *Hub {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Linger <= 0 {
		cfg.Linger = DefaultLinger
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Hub{cfg: cfg, ctx: ctx, cancel: cancel, shards: make(map[string]*shard)}
}

// ErrClosed is returned by Watch after Close.
var ErrClosed = errors.New("notify: hub closed")

// Watch registers the caller as a waiter on channel and returns once Redis has
// confirmed the subscription, the subscription has failed or is late (the
// waiter then gets no wake-ups and [Waiter.Subscribed] is false), or ctx is
// done (ctx.Err()). A subscription Redis refused for lack of permission
// (NOPERM: an ACL without the channel) is an error: it would fail again,
// and a waiter would wait on nothing. The caller must Close the waiter.
func (h *Hub) Watch(ctx context.Context, channel string) (*Waiter, error) {
	var w *Waiter
	var ready <-chan struct{}
	for w == nil { // a shard retired since shardFor found it: find it again
		sh, err := h.shardFor(ctx, channel)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, ErrClosed) {
				return nil, err
			}
			// No shard, no wake-ups: the waiter goes on with TTL-bounded retries.
			h.cfg.Logger.Debug("dlock: no subscriber for channel", "channel", channel, "err", err)
			return &Waiter{id: newWaiterID(), wake: make(chan struct{}, 1)}, nil
		}
		w, ready = sh.add(channel)
	}
	select {
	case <-ready: // already subscribed: the common case under contention, no timer
		return w.unlessRefused()
	default:
	}
	timeout := time.NewTimer(subscribeTimeout)
	defer timeout.Stop()
	select {
	case <-ready:
		return w.unlessRefused()
	case <-ctx.Done():
		w.Close()
		return nil, ctx.Err()
	case <-timeout.C:
		h.cfg.Logger.Debug("dlock: subscription not confirmed in time", "channel", channel)
		return w, nil
	}
}

// Close stops every subscriber goroutine and closes their connections.
// Waiters still registered get no more wake-ups.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	shards := h.shards
	h.shards = nil
	h.mu.Unlock()

	h.cancel()
	for _, sh := range shards {
		sh.stopTimers()
		_ = sh.ps.Close() // unblocks the reader's Receive
	}
	h.wg.Wait()
	return nil
}

// Ready reports whether channel is subscribed and confirmed already, so that
// Watch would return at once. It does no I/O.
func (h *Hub) Ready(channel string) bool {
	h.mu.Lock()
	shards := make([]*shard, 0, len(h.shards))
	for _, sh := range h.shards {
		shards = append(shards, sh)
	}
	h.mu.Unlock()
	for _, sh := range shards {
		if sh.isSubscribed(channel) {
			return true
		}
	}
	return false
}

// Goroutines reports how many subscriber goroutines run (one per shard in
// use; one that is retiring may still be ending).
func (h *Hub) Goroutines() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.shards)
}

func (h *Hub) shardFor(ctx context.Context, channel string) (*shard, error) {
	addr, node, err := h.nodeFor(ctx, channel)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if sh := h.shards[addr]; sh != nil {
		return sh, nil
	}
	sh := newShard(h, addr, node)
	h.shards[addr] = sh
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		sh.read()
	}()
	return sh, nil
}

// nodeFor names the shard a channel's messages are published on, and the
// client that subscribes there: a Ring's shard of the channel's hash tag;
// any node of a cluster before Redis 7, which broadcasts.
func (h *Hub) nodeFor(ctx context.Context, channel string) (string, redis.UniversalClient, error) {
	var node *redis.Client
	var err error
	switch rdb := h.cfg.Client.(type) {
	case *redis.Ring:
		node, err = rdb.GetShardClientForKey(channel)
	case *redis.ClusterClient:
		if !h.cfg.Sharded {
			return "", rdb, nil
		}
		node, err = rdb.MasterForKey(ctx, channel)
	default:
		return "", h.cfg.Client, nil
	}
	if err != nil {
		return "", nil, err
	}
	return node.Options().Addr, node, nil
}
