// Package dlocktest lets you test code that holds dlock locks against what
// happens to locks in production: a lease that expires under the holder, a
// lock taken by another owner, renewals that come late, a slow Redis, a
// Redis that is gone for a while.
//
// [Start] gives a Redis for one test: an embedded one (miniredis, in this
// process, nothing to install) or, when the environment variable
// DLOCK_TEST_REDIS_URL is set, the real Redis at that URL, under a key
// prefix of the test's own that is cleaned up after it. The same tests run
// on both, so a CI can choose:
//
//	func TestWorkerStopsWhenItsLockIsStolen(t *testing.T) {
//		ctx := t.Context()
//		r := dlocktest.Start(t)
//		// A short TTL: a loss shows at the next renewal, TTL/3 on.
//		lease, err := r.Client(dlock.WithTTL(300 * time.Millisecond)).Mutex("job").Lock(ctx)
//		if err != nil {
//			t.Fatal(err)
//		}
//		if _, err := r.Steal(ctx, "job"); err != nil {
//			t.Fatal(err)
//		}
//		<-lease.Done() // the worker under test must stop here
//	}
//
// Faults are made outside dlock, where real ones happen: in Redis (a hold
// removed, another owner's hold written) or on the connection (a go-redis
// hook that delays or refuses commands). The code under test meets them
// through dlock's own paths, its renewals refused or late, and its leases
// report the loss through Done, Err and Context with a real event's
// reason. [Redis.Disconnect] cuts one Client off while the others go on.
//
// dlocktest does not work inside a testing/synctest bubble: a goroutine
// blocked on a socket (dlock's to Redis, embedded or not) is not durably
// blocked, so the bubble's clock would stand still while a waiter listens.
package dlocktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// EnvRedisURL names the environment variable that makes [Start] use a real
// Redis: redis://[user:password@]host:port[/db], or rediss:// for TLS.
const EnvRedisURL = "DLOCK_TEST_REDIS_URL"

// Redis is one test's Redis, with faults on demand, safe for concurrent use.
type Redis struct {
	opts   *redis.Options
	prefix string // every lock of the test lives under it
	mini   *miniredis.Miniredis
	admin  redis.UniversalClient // no faults: what the faults themselves use
	faults *faults

	mu      sync.Mutex
	op      *dlock.Client                   // see operator
	hooks   map[*dlock.Client]*clientFaults // each Client's, for Disconnect
	closers []func() error                  // Close of each Client, then of its go-redis client; of the operator
}

// Start returns a Redis for t, stopped (or, for a real one, emptied of the
// test's keys) when t ends. It fails t if the Redis cannot be had.
func Start(t testing.TB) *Redis {
	t.Helper()
	r, err := NewRedis(os.Getenv(EnvRedisURL))
	if err != nil {
		t.Fatalf("dlocktest: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("dlocktest: %v", err)
		}
	})
	return r
}

// New returns a dlock Client on a Redis started for t (see [Start]) with
// opts: for a test that needs no faults.
func New(t testing.TB, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	return Start(t).Client(opts...)
}

// NewRedis returns a Redis outside of a test (an example, a program): the
// real one at url, or an embedded one when url is "". Close it when done.
func NewRedis(url string) (*Redis, error) {
	r := &Redis{faults: &faults{}, hooks: make(map[*dlock.Client]*clientFaults)}
	if url == "" {
		r.mini = miniredis.NewMiniRedis()
		r.mini.ClockTTL(true) // TTLs run on the real clock, as in Redis
		if err := r.mini.Start(); err != nil {
			return nil, fmt.Errorf("starting the embedded Redis: %w", err)
		}
		r.opts = &redis.Options{Addr: r.mini.Addr()}
		r.prefix = "dlock:"
	} else {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvRedisURL, err)
		}
		r.opts = opts
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		r.prefix = "dlock:test:" + hex.EncodeToString(b) + ":"
	}
	r.admin = redis.NewClient(r.opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.admin.Ping(ctx).Err(); err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("reaching Redis at %s: %w", r.opts.Addr, err)
	}
	return r, nil
}

// Client returns a new dlock Client on this Redis, on a go-redis client of
// its own (as another process would have), subject to the faults. The
// options come after the test's prefix, so WithPrefix would move the locks
// out of the test's reach: leave it out. Options [dlock.New] refuses are a
// mistake in the test: Client panics with New's error.
func (r *Redis) Client(opts ...dlock.Option) *dlock.Client {
	o := *r.opts
	o.ContextTimeoutEnabled, o.MaxRetries = true, -1 // a fault is seen once, as the code under test would see it
	rdb := redis.NewClient(&o)
	hook := &clientFaults{all: r.faults}
	rdb.AddHook(hook)
	c := mustNew(rdb, append([]dlock.Option{dlock.WithPrefix(r.prefix)}, opts...)...)
	r.mu.Lock()
	r.hooks[c] = hook
	r.closers = append(r.closers, c.Close, rdb.Close)
	r.mu.Unlock()
	return c
}

// Redis returns a go-redis client of this Redis that the faults do not
// touch, for a test that looks at what dlock wrote under [Redis.Prefix].
func (r *Redis) Redis() redis.UniversalClient { return r.admin }

// Prefix returns the key prefix the test's locks live under.
func (r *Redis) Prefix() string { return r.prefix }

// Embedded reports whether this Redis is the embedded one.
func (r *Redis) Embedded() bool { return r.mini != nil }

// Close closes every Client made by [Redis.Client], removes the test's keys
// from a real Redis and stops an embedded one.
func (r *Redis) Close() error {
	r.faults.set(func(f *faults) { f.stall, f.slow, f.down = 0, 0, false })
	r.mu.Lock()
	closers := r.closers
	r.closers, r.op = nil, nil
	clear(r.hooks)
	r.mu.Unlock()
	var errs []error
	for _, close := range closers {
		errs = append(errs, close())
	}
	if r.mini == nil {
		errs = append(errs, r.removeKeys())
	}
	errs = append(errs, r.admin.Close()) // made before any Close
	if r.mini != nil {
		r.mini.Close()
	}
	return errors.Join(errs...)
}

// removeKeys deletes every key under the test's prefix on a real Redis.
func (r *Redis) removeKeys() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for cursor := uint64(0); ; {
		keys, next, err := r.admin.Scan(ctx, cursor, r.prefix+"*", 1000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := r.admin.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// mustNew is [dlock.New] where an error can only be a mistake in the
// program (the test's options, or dlocktest's own).
func mustNew(rdb redis.UniversalClient, opts ...dlock.Option) *dlock.Client {
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		panic(fmt.Sprintf("dlocktest: %v", err))
	}
	return c
}
