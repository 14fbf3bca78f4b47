package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/dlockio/dlock"
)

// benchTTL is every library's lock TTL (expiry, validity).
const benchTTL = 10 * time.Second

// locker is one client of one library: its own connections, as a separate
// process would have. lock blocks until it holds key.
type locker interface {
	lock(ctx context.Context, key string) (unlock func(context.Context) error, err error)
	close()
}

// library opens lockers on the Redis at addr.
type library struct {
	name    string
	note    string // how it waits, for the report
	open    func(addr string) (locker, error)
	renews  bool // holds leases past their TTL by itself (workload 5)
	version string
}

var libraries = []library{
	{name: "ideal", note: "go-redis SET NX PX, compare-and-delete script; retries every 1 ms", open: openIdeal},
	{name: "dlock", note: "Mutex.Lock (a release hands the lock to a waiter and tells its client alone by pub/sub; auto-renewed)", open: openDlock, renews: true},
	{name: "dlock fair", note: "FairMutex.Lock (FIFO: a release hands the lock to the head of the line)", open: openDlockFair},
	{name: "redsync", note: "NewMutex(WithExpiry, WithTries(max)); default retry delay 50-250 ms", open: openRedsync},
	{name: "redislock", note: "Obtain with ExponentialBackoff(1 ms, 64 ms)", open: openRedislock},
	{name: "rueidislock", note: "WithContext, KeyMajority 1, NoLoopTracking (client-side caching wake-ups, auto-extended)", open: openRueidislock, renews: true},
}

// ideal is the two-round-trip minimum: SET NX PX to take, one script to
// release only one's own.
type ideal struct{ rdb *redis.Client }

var compareAndDelete = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func openIdeal(addr string) (locker, error) {
	return ideal{redis.NewClient(&redis.Options{Addr: addr})}, nil
}

func (l ideal) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	for {
		ok, err := l.rdb.SetNX(ctx, key, token, benchTTL).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return func(ctx context.Context) error {
				return compareAndDelete.Run(ctx, l.rdb, []string{key}, token).Err()
			}, nil
		}
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (l ideal) close() { _ = l.rdb.Close() }

type dlockLocker struct {
	rdb  *redis.Client
	c    *dlock.Client
	fair bool
}

func openDlock(addr string) (locker, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	c, err := dlock.New(rdb, dlock.WithTTL(benchTTL))
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return dlockLocker{rdb: rdb, c: c}, nil
}

func openDlockFair(addr string) (locker, error) {
	l, err := openDlock(addr)
	if err != nil {
		return nil, err
	}
	d := l.(dlockLocker)
	d.fair = true
	return d, nil
}

func (l dlockLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	lock := l.c.Mutex(key).Lock
	if l.fair {
		lock = l.c.FairMutex(key).Lock
	}
	lease, err := lock(ctx)
	if err != nil {
		return nil, err
	}
	return lease.Unlock, nil
}

func (l dlockLocker) close() {
	_ = l.c.Close()
	_ = l.rdb.Close()
}

type redsyncLocker struct {
	rdb *redis.Client
	rs  *redsync.Redsync
}

func openRedsync(addr string) (locker, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	return redsyncLocker{rdb, redsync.New(redsyncgoredis.NewPool(rdb))}, nil
}

func (l redsyncLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	m := l.rs.NewMutex(key, redsync.WithExpiry(benchTTL), redsync.WithTries(math.MaxInt32))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		_, err := m.UnlockContext(ctx)
		return err
	}, nil
}

func (l redsyncLocker) close() { _ = l.rdb.Close() }

type redislockLocker struct {
	rdb *redis.Client
	c   *redislock.Client
}

func openRedislock(addr string) (locker, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	return redislockLocker{rdb, redislock.New(rdb)}, nil
}

func (l redislockLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	for {
		lk, err := l.c.Obtain(ctx, key, benchTTL, &redislock.Options{
			RetryStrategy: redislock.ExponentialBackoff(time.Millisecond, 64*time.Millisecond)})
		if errors.Is(err, redislock.ErrNotObtained) && ctx.Err() == nil {
			continue // its retries ended with the context's deadline: ours has none
		}
		if err != nil {
			return nil, err
		}
		return lk.Release, nil
	}
}

func (l redislockLocker) close() { _ = l.rdb.Close() }

type rueidisLocker struct{ l rueidislock.Locker }

func openRueidislock(addr string) (locker, error) {
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: false},
		KeyMajority:    1,
		KeyValidity:    benchTTL,
		NoLoopTracking: true,
	})
	if err != nil {
		return nil, err
	}
	return rueidisLocker{l}, nil
}

func (l rueidisLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	_, cancel, err := l.l.WithContext(ctx, key)
	if err != nil {
		return nil, err
	}
	return func(context.Context) error { cancel(); return nil }, nil
}

func (l rueidisLocker) close() { l.l.Close() }
