package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/serverstats"
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
	{name: "floor", note: "the commands of dlock's uncontended Mutex lock and unlock, in two functions with no other logic: what dlock's rules cost the server whatever its code; retries every 1 ms", open: openFloor},
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
	return pollLock(ctx, func(token string) (bool, error) {
		return l.rdb.SetNX(ctx, key, token, benchTTL).Result()
	}, func(ctx context.Context, token string) error {
		return compareAndDelete.Run(ctx, l.rdb, []string{key}, token).Err()
	})
}

// pollLock tries to take a lock for a random token every millisecond
// until take does, and returns its release.
func pollLock(ctx context.Context, take func(token string) (bool, error), release func(ctx context.Context, token string) error) (func(context.Context) error, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	for {
		ok, err := take(token)
		if err != nil {
			return nil, err
		}
		if ok {
			return func(ctx context.Context) error { return release(ctx, token) }, nil
		}
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (l ideal) close() { _ = l.rdb.Close() }

// floorLibrary runs exactly the commands dlock's uncontended Mutex runs
// (checked by checkFloor), in the same order, and nothing else: a lock
// whose only cost is its rules' reads and writes.
const floorLibrary = `#!lua name=floor
redis.register_function('floor_acquire', function(keys, args)
  redis.call('PTTL', keys[4])
  local values = redis.call('MGET', keys[1], keys[2], keys[3])
  if redis.call('SET', keys[1], args[1], 'NX', 'GET', 'PX', args[2]) then
    return 0
  end
  redis.call('TIME')
  local last = tonumber(values[2]) or 0
  redis.call('SET', keys[2], last + 1)
  return last + 1
end)
redis.register_function('floor_release', function(keys, args)
  if redis.call('MGET', keys[1], keys[2])[1] ~= args[1] then
    return 0
  end
  redis.call('PTTL', keys[3])
  redis.call('DEL', keys[1])
  redis.call('SET', keys[4], '1', 'PX', 5000)
  return 1
end)
`

type floor struct{ rdb *redis.Client }

func openFloor(addr string) (locker, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	err := rdb.FunctionLoadReplace(context.Background(), floorLibrary).Err()
	if err == nil {
		err = checkFloor(context.Background(), rdb)
	}
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return floor{rdb}, nil
}

func (l floor) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	lock := "{" + key + "}"
	return pollLock(ctx, func(token string) (bool, error) {
		n, err := l.rdb.FCall(ctx, "floor_acquire", []string{lock, lock + ":fence", lock + ":void", lock + ":waiters"}, token, benchTTL.Milliseconds()).Int()
		return n != 0, err
	}, func(ctx context.Context, token string) error {
		return l.rdb.FCall(ctx, "floor_release", []string{lock, lock + ":fence", lock + ":waiters", lock + ":released"}, token).Err()
	})
}

func (l floor) close() { _ = l.rdb.Close() }

// checkFloor fails unless a floor lock+unlock runs the commands a dlock
// Mutex's does, command for command, on the server behind rdb.
func checkFloor(ctx context.Context, rdb *redis.Client) error {
	c, err := dlock.New(rdb)
	if err != nil {
		return err
	}
	defer c.Close()
	calls := func(pair func(context.Context) error) (map[string]int64, error) {
		if err := pair(ctx); err != nil { // the library loaded, the rights seen
			return nil, err
		}
		before, err := serverstats.Calls(ctx, rdb)
		if err == nil {
			err = pair(ctx)
		}
		after, err2 := serverstats.Calls(ctx, rdb)
		if err = errors.Join(err, err2); err != nil {
			return nil, err
		}
		for cmd, n := range before {
			if after[cmd] -= n; after[cmd] == 0 || cmd == "hello" { // a new connection's
				delete(after, cmd)
			}
		}
		return after, nil
	}
	pair := func(l locker) func(context.Context) error {
		return func(ctx context.Context) error {
			unlock, err := l.lock(ctx, "floor-check")
			if err != nil {
				return err
			}
			return unlock(ctx)
		}
	}
	floorCalls, err := calls(pair(floor{rdb}))
	if err != nil {
		return err
	}
	dlockCalls, err := calls(pair(dlockLocker{c: c}))
	if err != nil {
		return err
	}
	if !maps.Equal(floorCalls, dlockCalls) {
		return fmt.Errorf("the floor runs %v, a dlock Mutex %v: floorLibrary must follow mutex_acquire.lua and mutex_release.lua", floorCalls, dlockCalls)
	}
	return nil
}

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
