package dlock

import (
	"context"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/observe"
)

// handle is what every lock handle holds: name, keys and settings, nothing
// that changes, so it is safe to share and costs no I/O to make.
type handle struct {
	c    *Client
	name string
	keys keys
	cfg  settings
	err  error // bad arguments, returned before any I/O
}

func (c *Client) newHandle(name string, opts []Option, scope optionScope) handle {
	if c == nil {
		return handle{name: name, err: invalidf("nil dlock.Client")}
	}
	cfg := c.cfg.with(opts)
	h := handle{c: c, name: name, cfg: cfg, keys: keysFor(cfg.prefix, name)}
	h.keys.own = h.keys.channel + ":" + c.tag
	if h.err = validateName(name); h.err == nil {
		h.err = cfg.validate(scope)
	}
	return h
}

// Name returns the lock's name.
func (h *handle) Name() string { return h.name }

func (h *handle) check(ctx context.Context) error {
	if h.err != nil {
		return h.err
	}
	return h.c.usable(ctx)
}

// acquire is TryLock (try) or Lock of any type, by the call newCall makes.
func (h *handle) acquire(ctx context.Context, kind observe.Kind, try bool, newCall func(context.Context) *call) (*Lease, error) {
	if err := h.check(ctx); err != nil {
		return nil, err
	}
	return acquireBy(ctx, h.cfg, kind, h.name, try, func(ctx context.Context, try bool) (*Lease, error) {
		return acquireCall(ctx, newCall(ctx), try)
	})
}

// acquireBy is every acquire call of every type: inside the observer's
// bracket, take tries once or waits, bounded by [WithWait].
func acquireBy(ctx context.Context, cfg settings, kind observe.Kind, name string, try bool, take func(ctx context.Context, try bool) (*Lease, error)) (*Lease, error) {
	try = try || (cfg.waitSet && cfg.wait == 0) // WithWait(0)
	run := func(ctx context.Context) (*Lease, error) {
		if !try && cfg.waitSet {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, cfg.wait)
			defer cancel()
		}
		return take(ctx, try)
	}
	if o := cfg.observer; o != nil {
		return o.acquire(ctx, kind, name, try, run)
	}
	return run(ctx)
}

// acquireSpec is what differs between the types' attempts, made once per
// handle (and mode) with every key name and number boxed once.
type acquireSpec struct {
	op        string        // the operation, for errors: "lock", "acquire", "campaign"…
	script    *redis.Script // the acquire script
	publishes bool          // its ARGV end with the publish command, asked for before the attempt
	queues    bool          // waiters register even unsubscribed: a FairMutex's line is its registrations
	channels  []string      // where a waiter listens (a MultiLock group's: one per lock)

	keys, abandonKeys [2][]string // the scripts' KEYS before and after the call's tombstone

	lease       leaseSpec // what every lease of the handle shares
	releaseKeys []string  // its release's KEYS, up to the release mark

	head, rest              []any // "evalsha", SHA, number of KEYS, keys[0]; keys[1]
	ttl, registration, info any   // scripts.Acquire's TTL and WaiterTTL, the holder info
	takenBy                 any   // the read-write scripts': the type a write hold is taken by
}

// boxed finishes s for h: its command and its lease's release, boxed once.
func (h *handle) boxed(s acquireSpec) *acquireSpec {
	ttl, renew := h.cfg.holdTTL()
	var b boxer
	name, id := fcall.Head(s.script)
	head := append(make([]any, 0, 3+len(s.keys[0])), name, id, len(s.keys[0])+1+len(s.keys[1]))
	s.head = b.keys(head, s.keys[0])
	s.rest = b.keys(nil, s.keys[1])
	s.ttl, s.registration, s.info = boxMillis(ttl), boxMillis(waiterLease(h.cfg.waiterRefresh)), h.cfg.holderInfo
	if s.lease.name == "" {
		s.lease.name = h.name
	}
	s.lease.cfg = h.cfg
	s.lease.relKeys = b.keys(make([]any, 0, len(s.releaseKeys)), s.releaseKeys)
	s.lease.rules = leaseRules{log: h.cfg.logger, drift: h.cfg.drift, renew: renew, renewer: h.c.renewer}
	return &s
}

// boxer boxes each key name of a handle's commands once (see keyLists).
type boxer struct {
	names [12]string
	boxes [12]any
	n     int
}

func (b *boxer) box(name string) any {
	if i := slices.Index(b.names[:b.n], name); i >= 0 {
		return b.boxes[i]
	}
	v := any(name)
	if b.n < len(b.names) {
		b.names[b.n], b.boxes[b.n] = name, v
		b.n++
	}
	return v
}

func (b *boxer) keys(argv []any, keys []string) []any {
	for _, k := range keys {
		argv = append(argv, b.box(k))
	}
	return argv
}

// boxMillis is d in ms as an argument, the defaults boxed once.
func boxMillis(d time.Duration) any {
	switch d {
	case DefaultTTL:
		return defaultTTLMillis
	case waiterLease(DefaultWaiterRefresh):
		return defaultRegistrationMillis
	}
	return d.Milliseconds()
}

var defaultTTLMillis, defaultRegistrationMillis any = DefaultTTL.Milliseconds(), waiterLease(DefaultWaiterRefresh).Milliseconds()
