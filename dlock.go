package dlock

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/notify"
)

// Client makes locks on one Redis deployment: a single server, a Sentinel
// failover group or a Redis Cluster, whatever go-redis's
// [redis.UniversalClient] reaches. It is safe for concurrent use. It runs at
// most one renewal goroutine and one subscriber goroutine per shard, started
// on first use and stopped by [Client.Close].
type Client struct {
	rdb redis.UniversalClient
	cfg settings
	err error // bad arguments to New, returned by every operation

	renewer *renewer
	scripts *coalescer // acquires and releases, shared pipelines under concurrency

	// tag names this Client's own wake-up channel of each Mutex (see
	// Mutex.Lock): a release tells the waiter it hands the lock to there,
	// and so reaches its client alone rather than every subscriber.
	tag string

	mu      sync.Mutex
	hub     *notify.Hub
	publish string // "PUBLISH" or "SPUBLISH", once known
	closed  bool
	done    chan struct{} // closed by Close: waiting Locks give up
}

// New returns a Client that takes locks through rdb. Options set defaults for
// every lock the Client makes.
//
// New sends nothing to Redis. Bad arguments (a nil rdb, a TTL below [MinTTL]…)
// are not a panic: every operation of the Client returns the error, matching
// [ErrInvalid].
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	c := &Client{rdb: rdb, cfg: defaultSettings().with(opts), done: make(chan struct{}), tag: newClientTag()}
	switch {
	case rdb == nil:
		c.err = invalidf("nil Redis client")
	default:
		c.err = c.cfg.validate()
	}
	c.renewer = newRenewer(c)
	c.scripts = &coalescer{rdb: rdb}
	return c
}

// Close stops the Client's background work: renewal and subscriptions. Locks
// still waiting return [ErrClosed]. Leases still held are no longer renewed
// and end as lost at their deadline; unlock them first. Close does not close
// rdb.
func (c *Client) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	hub := c.hub
	c.mu.Unlock()

	c.renewer.close()
	if hub != nil {
		return hub.Close()
	}
	return nil
}

// keys are the Redis names of one lock. All share the hash tag {name}, so one
// lock lives in one cluster slot and each script touches one slot. A
// read-write lock has a few more, made from these (see rwScriptKeys).
type keys struct {
	lock    string // the lock's state
	fence   string // fencing counter, no TTL
	channel string // wake-ups (of writers, for an RWMutex)
	waiters string // who waits to be woken, by registration expiry

	// own is where a release tells this Client's waiters that it picked
	// them: channel, ':', the Client's tag (see wake_waiter in common.lua).
	// Set by Client.waitingKeys, for the types whose waiters listen there.
	own string
}

func keysFor(prefix, name string) keys {
	base := prefix + "{" + name + "}"
	return keys{lock: base, fence: base + ":fence", channel: base + ":wake", waiters: base + ":waiters"}
}

// waitingKeys are the keys of a lock whose waiters listen on their Client's
// own channel: made once per handle, not per Lock.
func (c *Client) waitingKeys(prefix, name string) keys {
	k := keysFor(prefix, name)
	k.own = k.channel + ":" + c.tag
	return k
}

// tagged is how a waiter of this Client registers, so that a release tells
// it on the Client's own channel alone: its id after the Client's tag; ""
// (not registering) stays "".
func (c *Client) tagged(waiterID string) string {
	if waiterID == "" {
		return ""
	}
	return c.tag + "/" + waiterID
}

// tombstone is where an abandoned attempt is marked void (see mutex_abandon.lua).
func (k keys) tombstone(owner string) string { return k.lock + ":void:" + owner }

// usable is checked before any I/O.
func (c *Client) usable() error {
	if c == nil {
		return invalidf("nil dlock.Client")
	}
	if c.err != nil {
		return c.err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

// publishCommand is what release scripts publish wake-ups with: SPUBLISH on a
// Redis 7 cluster (a message stays on the slot's shard), PUBLISH elsewhere
// (a cluster before 7 broadcasts it to every node). It asks a cluster's
// version once.
func (c *Client) publishCommand(ctx context.Context) (string, error) {
	c.mu.Lock()
	known := c.publish
	c.mu.Unlock()
	if known != "" {
		return known, nil
	}
	command := "PUBLISH"
	if _, isCluster := c.rdb.(*redis.ClusterClient); isCluster {
		info, err := c.rdb.Info(ctx, "server").Result()
		if err != nil {
			return "", fmt.Errorf("dlock: reading the cluster's version: %w", err)
		}
		if redisMajorVersion(info) >= 7 {
			command = "SPUBLISH"
		}
	}
	c.mu.Lock()
	c.publish = command
	c.mu.Unlock()
	return command, nil
}

func redisMajorVersion(info string) int {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			major, _, _ := strings.Cut(v, ".")
			n, _ := strconv.Atoi(major)
			return n
		}
	}
	return 0
}

// notifier returns the Client's subscriber, creating it on first use.
func (c *Client) notifier(ctx context.Context) (*notify.Hub, error) {
	publish, err := c.publishCommand(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if c.hub == nil {
		c.hub = notify.New(notify.Config{Client: c.rdb, Sharded: publish == "SPUBLISH", Logger: c.cfg.logger})
	}
	return c.hub, nil
}

// subscribed reports, without I/O, whether the Client already listens on
// channel with a confirmed subscription.
func (c *Client) subscribed(channel string) bool {
	c.mu.Lock()
	hub := c.hub
	c.mu.Unlock()
	return hub != nil && hub.Ready(channel)
}

// release runs a release script for one owner and reports whether it let go
// of a hold. It is not stopped by ctx's cancellation (only bounded by
// [CleanupTimeout]): the caller's hold must go whatever the caller's context.
// Its script takes the owner token and the publish command as ARGV[1] and
// ARGV[2], then extra.
func (c *Client) release(ctx context.Context, script *redis.Script, keys []string, owner string, extra ...any) (bool, error) {
	return c.releaseArgv(ctx, script, evalshaArgv(script, keys, nil), owner, extra...)
}

// releaseArgv is release with the EVALSHA command built up to the owner
// token (a Mutex keeps its own boxed: see Mutex.argv).
func (c *Client) releaseArgv(ctx context.Context, script *redis.Script, head []any, owner string, extra ...any) (bool, error) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	publish, err := c.publishCommand(ctx)
	if err != nil {
		return false, err
	}
	argv := make([]any, 0, len(head)+2+len(extra))
	argv = append(argv, head...)
	argv = append(argv, owner, publishArg(publish))
	argv = append(argv, extra...)
	n, err := c.scripts.runArgv(ctx, script, argv).Int64()
	return n == 1, err
}

// The publish commands as script arguments, boxed once.
var publishArgs = [2]any{"PUBLISH", "SPUBLISH"}

func publishArg(command string) any {
	if command == "SPUBLISH" {
		return publishArgs[1]
	}
	return publishArgs[0]
}

// cleanupContext is the context of work that must go on after its caller
// has given up (a release, an abandon): not cancelled with ctx, and bounded
// by CleanupTimeout. A context that can never end (Background) is used as
// it is, which spares a lock+unlock five allocations: nothing can cut the
// work short, and the Redis client's own timeouts bound it.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, noCancel
	}
	return context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
}

func noCancel() {}

// abandon clears up after an acquire that gives up: one whose outcome is
// unknown (Redis may have applied it before the client gave up on the reply,
// or may yet apply it), or a waiter that stops waiting. The kind's abandon
// script releases a hold that is there, leaves a tombstone that makes a late
// attempt refuse itself, and unregisters the waiter. Like release, it is not
// stopped by ctx's cancellation.
func (c *Client) abandon(ctx context.Context, name string, script *redis.Script, keys []string, log *slog.Logger, owner string, extra ...any) {
	if _, err := c.release(ctx, script, keys, owner, extra...); err != nil {
		log.Warn("dlock: could not clear up a failed attempt; it expires with its TTL", "lock", name, "err", err)
	}
}
