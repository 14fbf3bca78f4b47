package dlock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/clock"
	"github.com/dlockio/dlock/internal/dialwatch"
	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/internal/inspect"
	"github.com/dlockio/dlock/internal/notify"
	"github.com/dlockio/dlock/internal/scripts"
)

// Client makes locks on one Redis deployment: a single server, a Sentinel
// failover group, a Redis Cluster or a [redis.Ring]. It is safe for
// concurrent use. Its background work starts on first use and stops with
// [Client.Close]: one renewal goroutine (and one per node while renewals
// are in flight), one subscriber per shard, and a node check (see
// [Client.Check]). A Ring moves names while a shard is down, so a held lock
// can be taken again (docs/SAFETY.md).
type Client struct {
	rdb redis.UniversalClient
	fns fcall.Functions // how rdb's servers take dlock's scripts
	cfg settings

	renewer *renewer
	flights *fcall.Coalescer // acquires and releases, shared pipelines under concurrency
	rights  rightsSeen       // which acquires' rights checks passed (rights.go)
	dials   *dialwatch.Watch // why rdb's last dial failed: see waiting.noteOutage

	resendAfter time.Duration // a command this slow may have been sent twice (see clientHold.maybeCopied)
	tag         string        // names this Client's own wake-up channel of each lock (keys.own)
	redis       string        // the Redis rdb talks to, "" if unknown: a hold in a context is ours only if equal (see ownerFor)

	attempted func(attemptReport) // set by tests before first use: hears each attempt's reply before it acts
	clock     *clock.Clock        // the leases' time: nil, the machine's; fault tests set one they suspend

	mu      sync.Mutex
	hub     *notify.Hub
	publish any // "PUBLISH" or "SPUBLISH", once known
	closed  bool
	done    chan struct{}  // closed by Close: waiting Locks give up
	watch   *inspect.Watch // the Client's own check of its nodes
}

// New returns a Client that takes locks through rdb. Options set defaults for
// every lock the Client makes. New sends nothing to Redis. Bad arguments (a
// nil rdb, a TTL below [MinTTL]…) fail it at once, matching [ErrInvalid]:
// a Client is made once, at start-up, where a mistake is best found.
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	cfg := defaultSettings().with(opts)
	resend, made := resendAfter(rdb)
	if !made {
		return nil, invalidf("nil Redis client")
	}
	if err := cfg.validate(forClient); err != nil {
		return nil, err
	}
	c := &Client{rdb: rdb, cfg: cfg, done: make(chan struct{}), tag: newClientTag(), resendAfter: resend}
	c.renewer = newRenewer(c)
	c.flights = fcall.NewCoalescer(rdb, &c.fns)
	c.dials = dialwatch.Of(rdb)
	c.watch = inspect.NewWatch(rdb, cfg.logger)
	c.redis = redisIdentity(rdb)
	return c, nil
}

// mayHaveResent reports whether a command sent at sent, and answered now,
// may have been sent twice by the Redis client (see resendAfter).
func (c *Client) mayHaveResent(sent time.Time) bool {
	return time.Since(sent) >= c.resendAfter
}

// resendAfter is rdb's read timeout. go-redis resends a command only after
// a read timed out; a failed connection leaves no copy. So one answered
// sooner was sent once; another kind of client may resend anything. made
// is false for a nil rdb or pointer, or one not made by its constructor.
func resendAfter(rdb redis.UniversalClient) (after time.Duration, made bool) {
	if rdb == nil {
		return 0, false
	}
	if v := reflect.ValueOf(rdb); v.Kind() == reflect.Pointer && v.IsNil() {
		return 0, false
	}
	defer func() {
		if recover() != nil { // reading a nil Options' field panics too
			after, made = 0, false
		}
	}()
	var read time.Duration
	switch r := rdb.(type) {
	case *redis.Client:
		read = r.Options().ReadTimeout // 0 or -1 once defaulted: no timeout, nothing is resent
	case *redis.ClusterClient:
		read = r.Options().ReadTimeout
	case *redis.Ring:
		if read = r.Options().ReadTimeout; read == 0 {
			read = 5 * time.Second // go-redis's default, which its shards take
		}
	default:
		return 0, true
	}
	if read <= 0 {
		return time.Duration(math.MaxInt64), true
	}
	return read, true
}

// Close stops the Client's background work (renewal, subscriptions, its
// check of the nodes), waiting for work under way at most [CleanupTimeout].
// Locks still waiting return [ErrClosed]; leases still held, no longer
// renewed, end as lost at their deadline: unlock them first. rdb stays open.
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

	deadline := time.Now().Add(CleanupTimeout)
	c.renewer.close(deadline)
	waitUntil(c.watch.Stop(), deadline) // an INFO stuck on a stalled server, with no read timeout, ends later
	if hub != nil {
		return hub.Close()
	}
	return nil
}

// keys are one lock's Redis names: its key and suffixes from
// internal/scripts/layout.go, in one slot (hash tag {name}) for the scripts.
type keys struct {
	lock    string // the lock's state
	fence   string // fencing counter (see mint_token in internal/scripts/common.lua)
	channel string // wake-ups (of writers, for an RWMutex)
	waiters string // who waits to be woken, by registration expiry
	own     string // where a release tells this Client's waiters it picked them (wake_waiter in common.lua)
}

func keysFor(prefix, name string) keys {
	base := prefix + "{" + name + "}"
	return keys{lock: base, fence: base + scripts.FenceSuffix, channel: base + scripts.ChannelSuffix, waiters: base + scripts.WaitersSuffix}
}

// tagged is how a waiter of this Client registers, so that a release tells
// it on the Client's own channel alone; "" (not registering) stays "".
func (c *Client) tagged(waiterID string) string {
	if waiterID == "" {
		return ""
	}
	return c.tag + "/" + waiterID
}

// secretKey is base and sep followed by a hash of token, in one
// allocation: a token is the proof a lease shows to renew and release, and
// key names are seen by KEYS, MONITOR and error messages.
func secretKey(base, sep, token string) string {
	sum := sha256.Sum256([]byte(token))
	var digits [32]byte
	hex.Encode(digits[:], sum[:16])
	return base + sep + string(digits[:]) // digits stay on the stack
}

// tombstone marks void a call that gave up (call: its attempts' owner
// token). Abandons write it, and releases of a lease given up or maybe
// copied; an acquire finding it does nothing. [scripts.TombstoneLife], its
// life, is many times a copy's time on the way, not the TTL (maybe years).
func (k keys) tombstone(call string) string { return secretKey(k.lock, scripts.Tombstone.Suffix, call) }

// releaseMark is where a release that let go of owner's hold says so, for
// releaseMarkLife: a resent copy of the release that finds nothing left
// reports the release done, not ErrNotHeld.
func releaseMark(lock, owner string) string {
	return secretKey(lock, scripts.ReleaseMark.Suffix, owner)
}

// releaseMarkLife is as long as an Unlock waits for its release, so any
// copy whose reply the Unlock reads was applied while the mark lived.
const releaseMarkLife = CleanupTimeout

// The scripts' MARK_TTL is releaseMarkLife: a negative constant overflows
// uint, so the build fails where they differ.
const _ = uint(releaseMarkLife-scripts.ReleaseMarkLife) + uint(scripts.ReleaseMarkLife-releaseMarkLife)

// usable is checked before any I/O.
func (c *Client) usable(ctx context.Context) error {
	if c == nil {
		return invalidf("nil dlock.Client")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if ctx.Err() == nil { // a call that sends nothing starts no check either
		c.watch.Use()
	}
	return nil
}

// publishCommand is what release scripts publish wake-ups with: SPUBLISH on
// a Redis 7 cluster (a message stays on the slot's shard), else PUBLISH. As
// a boxed constant, it costs a script's argument no allocation.
func (c *Client) publishCommand(ctx context.Context) (any, error) {
	c.mu.Lock()
	known := c.publish
	c.mu.Unlock()
	if known != nil {
		return known, nil
	}
	var command any = "PUBLISH"
	if _, isCluster := c.rdb.(*redis.ClusterClient); isCluster {
		info, err := c.rdb.Info(ctx, "server").Result()
		if err != nil {
			return nil, fmt.Errorf("dlock: reading the cluster's version: %w", unavailable(err))
		}
		major, _, _ := strings.Cut(inspect.InfoField(info, "redis_version"), ".")
		if n, _ := strconv.Atoi(major); n >= 7 {
			command = "SPUBLISH"
		}
	}
	c.mu.Lock()
	c.publish = command
	c.mu.Unlock()
	return command, nil
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

// cleanupContext is ctx freed of its cancellation, for a release or an
// abandon, and bounded by CleanupTimeout: a frozen server cannot hold Unlock.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() != nil { // nothing to strip from Background: one allocation less
		ctx = context.WithoutCancel(ctx)
	}
	return context.WithTimeout(ctx, CleanupTimeout)
}
