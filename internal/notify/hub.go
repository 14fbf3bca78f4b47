// Package notify turns Redis pub/sub messages into wake-ups for goroutines
// waiting on a lock.
//
// A Hub keeps one subscriber connection per shard (per master on a Redis 7
// cluster) and hands each message to this process's waiters on that
// channel, as [WakeAll] says.
//
// Wake-ups are lossless: [Hub.Watch] returns only once Redis has confirmed
// the subscription, so a waiter that watches, then tries the lock and
// fails, cannot miss the release that follows. Where the subscription
// cannot be had or breaks, Watch still returns: the waiter bounds its waits
// by the holder's TTL, as it does anyway, and is never blocked for good.
package notify

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// WakeAll is the payload that wakes every waiter on a channel (a writer
// left: all readers may enter). Any other payload is the id of the waiter
// to wake, with anything for it after a colon ([Waiter.Grant]).
const WakeAll = "*"

// subscribeTimeout bounds Watch's wait for Redis to confirm a subscription.
const subscribeTimeout = 2 * time.Second

// Config says how a Hub reaches Redis.
type Config struct {
	Client redis.UniversalClient
	// Sharded: SSUBSCRIBE on the master of each channel's slot, for a
	// Redis 7 cluster, whose release scripts use SPUBLISH.
	Sharded bool
	Logger  *slog.Logger
	// Linger is how long a channel stays subscribed after its last waiter
	// left (default 10 s): a contended lock is waited on again and
	// again, and a subscription kept saves a round trip.
	Linger time.Duration
}

// Hub is the subscriber of one dlock client; call [New]. It runs a
// goroutine per shard in use; [Hub.Close] stops them all.
type Hub struct {
	cfg Config

	ctx    context.Context // cancelled by Close; used for the hub's own I/O
	cancel context.CancelFunc

	mu     sync.Mutex
	shards map[string]*shard // by node address; "" when not sharded; nil once closed
	wg     sync.WaitGroup
}

// New returns a Hub that subscribes through cfg.Client.
func New(cfg Config) *Hub {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Linger <= 0 {
		cfg.Linger = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Hub{cfg: cfg, ctx: ctx, cancel: cancel, shards: make(map[string]*shard)}
}

// ErrClosed is returned by Watch after Close.
var ErrClosed = errors.New("notify: hub closed")

// Watch registers the caller as a waiter on channel and returns once Redis
// has confirmed the subscription, the subscription failed or is late (then
// [Waiter.Subscribed] is false), or ctx is done (ctx.Err()). A refusal for
// lack of permission (NOPERM) is an error: it would fail again, and the
// waiter would wait on nothing. The caller must Close the waiter.
func (h *Hub) Watch(ctx context.Context, channel string) (*Waiter, error) {
	var w *Waiter
	var ready <-chan struct{}
	for w == nil { // a shard retired since shardFor found it: find it again
		sh, err := h.shardFor(ctx, channel)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, ErrClosed) {
				return nil, cmp.Or(ctx.Err(), err)
			}
			// No shard, no wake-ups: the waiter goes on with TTL-bounded retries.
			h.cfg.Logger.Debug("dlock: no subscriber for channel", "channel", channel, "err", err)
			return &Waiter{id: newWaiterID(), wake: make(chan struct{}, 1)}, nil
		}
		w, ready = sh.add(channel)
	}
	select {
	case <-ready: // already subscribed: the common case under contention, no timer
	default:
		timeout := time.NewTimer(subscribeTimeout)
		defer timeout.Stop()
		select {
		case <-ready:
		case <-ctx.Done():
			w.Close()
			return nil, ctx.Err()
		case <-timeout.C:
			h.cfg.Logger.Debug("dlock: subscription not confirmed in time", "channel", channel)
			return w, nil
		}
	}
	w.mu.Lock()
	refused := w.refused
	w.mu.Unlock()
	if refused != nil {
		w.Close()
		return nil, refused
	}
	return w, nil
}

// Close stops every subscriber goroutine and closes their connections;
// waiters still registered get no more wake-ups.
func (h *Hub) Close() error {
	h.mu.Lock()
	shards := h.shards
	h.shards = nil
	h.mu.Unlock()
	if shards == nil {
		return nil
	}
	h.cancel()
	for _, sh := range shards {
		sh.mu.Lock()
		for _, tp := range sh.topics {
			tp.stopIdle()
		}
		sh.mu.Unlock()
		_ = sh.ps.Close() // unblocks the reader's Receive
	}
	h.wg.Wait()
	return nil
}

// Ready reports, without I/O, whether channel's subscription is confirmed,
// so that Watch would return at once.
func (h *Hub) Ready(channel string) bool {
	h.mu.Lock()
	shards := slices.Collect(maps.Values(h.shards)) // isSubscribed takes sh.mu, which drop holds to take h.mu
	h.mu.Unlock()
	return slices.ContainsFunc(shards, func(sh *shard) bool { return sh.isSubscribed(channel) })
}

// Goroutines counts the subscriber goroutines (one retiring may be ending).
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
	if h.shards == nil {
		return nil, ErrClosed
	}
	if sh := h.shards[addr]; sh != nil {
		return sh, nil
	}
	sh := &shard{hub: h, addr: addr, sharded: h.cfg.Sharded && addr != "", node: node, topics: make(map[string]*topic)}
	if sh.sharded {
		sh.ps = node.SSubscribe(h.ctx)
		sh.subscribe, sh.unsubscribe = sh.ps.SSubscribe, sh.ps.SUnsubscribe
	} else {
		sh.ps = node.Subscribe(h.ctx)
		sh.subscribe, sh.unsubscribe = sh.ps.Subscribe, sh.ps.Unsubscribe
	}
	h.shards[addr] = sh
	h.wg.Go(sh.read)
	return sh, nil
}

// nodeFor names the shard a channel's messages are published on, any node
// of a cluster without Sharded (which broadcasts), and its client.
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
