package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// dialTimeout bounds connecting, so an unreachable server is an error, not a hang.
const dialTimeout = 3 * time.Second

const defaultRedisURL = "redis://127.0.0.1:6379"

// redisFlagUsage is the --redis of the commands that use the default.
const redisFlagUsage = "Redis `URL` (default: REDIS_URL, else " + defaultRedisURL + ")"

// sandboxRedisUsage is the demo's and the bench's --redis: without it they
// run on an embedded Redis, whatever REDIS_URL says.
const sandboxRedisUsage = "Redis `URL` to run on (default: an embedded Redis; REDIS_URL is not used)"

// redisURL is the --redis flag, else REDIS_URL; empty when neither is set.
func redisURL(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return os.Getenv("REDIS_URL")
}

// dialer makes clients of the Redis deployment at one URL.
type dialer struct {
	opts    *redis.Options
	addrs   []string
	cluster bool
}

// errBadAddress: a --redis or REDIS_URL that dlock cannot use. A bad
// argument (exit 2), not an unreachable server.
var errBadAddress = errors.New("bad Redis URL")

// addressForms is what the --redis flag and REDIS_URL accept.
const addressForms = `want redis://[user:password@]host:port[/db], rediss://… for TLS, ` +
	`unix:///path/to/socket, or host:port; several, separated by commas, for the nodes of a cluster`

// errAccess: Redis answered but refused dlock: a wrong user or password, or
// a command the user may not run (exit 77).
var errAccess = errors.New("refused by Redis")

// parseRedisURL reads a redis:// or rediss:// URL, a bare host:port, or
// several separated by commas (the nodes of a cluster; user, password and
// TLS come from the first).
func parseRedisURL(url string) (*dialer, error) {
	var d *dialer
	for _, u := range strings.Split(url, ",") {
		u = strings.TrimSpace(u)
		full := u
		if !strings.Contains(u, "://") {
			full = "redis://" + u // host:port, which url.Parse takes for a scheme
		}
		opts, err := redis.ParseURL(full)
		if err != nil || u == "" {
			return nil, fmt.Errorf("%w %q: %s", errBadAddress, u, addressForms)
		}
		if d == nil {
			opts.DialTimeout = dialTimeout
			opts.ContextTimeoutEnabled = true
			d = &dialer{opts: opts}
		}
		d.addrs = append(d.addrs, opts.Addr)
	}
	d.cluster = len(d.addrs) > 1
	return d, nil
}

func (d *dialer) client() redis.UniversalClient {
	if !d.cluster {
		return redis.NewClient(d.opts)
	}
	o := d.opts
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: d.addrs, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
		DialTimeout: o.DialTimeout, ContextTimeoutEnabled: true,
	})
}

func (d *dialer) String() string { return strings.Join(d.addrs, ", ") }

// connect opens a client of the deployment at url, after checking that it
// answers within the dial timeout. A single address that turns out to be a
// cluster node gets a cluster client.
//
// It asks INFO whether the server is a cluster node. A user granted only
// what the README lists for a single server may not run INFO: a refused INFO
// is then answered by PING, and the server taken for a standalone one (a
// cluster's user is granted INFO, or given every node's address).
func connect(ctx context.Context, url string) (*dialer, redis.UniversalClient, error) {
	d, err := parseRedisURL(url)
	if err != nil {
		return nil, nil, err
	}
	rdb := d.client()
	pingCtx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	info, err := rdb.Info(pingCtx, "cluster").Result()
	if isNoPerm(err) {
		info, err = "", rdb.Ping(pingCtx).Err()
	}
	if err != nil {
		_ = rdb.Close()
		if refusedAccess(err) {
			return nil, nil, fmt.Errorf("%w at %s: %w", errAccess, d, err)
		}
		return nil, nil, fmt.Errorf("cannot reach Redis at %s: %w", d, err)
	}
	if !d.cluster && strings.Contains(info, "cluster_enabled:1") {
		_ = rdb.Close()
		d.cluster = true
		rdb = d.client()
	}
	return d, rdb, nil
}

// isNoPerm recognises an ACL refusal of a command.
func isNoPerm(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOPERM")
}

// refusedAccess recognises a refused login (a wrong user or password, a
// password missing) or command.
func refusedAccess(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return isNoPerm(err) || strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOAUTH") ||
		strings.Contains(msg, "invalid password") || strings.Contains(msg, "invalid username-password")
}

// openLocks connects to the Redis given by flag, REDIS_URL or the default.
// It returns nil and the exit code when it cannot (see exitCodeOf); else
// close it with done.
func openLocks(ctx context.Context, command, flagValue string, out *output, opts ...dlock.Option) (client *dlock.Client, done func(), code int) {
	client, _, done, code = openClient(ctx, command, flagValue, out, opts...)
	return client, done, code
}

// openClient is openLocks, and the Redis client beneath for what dlock's
// Client does not do (ls's SCAN).
func openClient(ctx context.Context, command, flagValue string, out *output, opts ...dlock.Option) (client *dlock.Client, rdb redis.UniversalClient, done func(), code int) {
	url := redisURL(flagValue)
	if url == "" {
		url = defaultRedisURL
	}
	_, rdb, err := connect(ctx, url)
	if err != nil {
		fmt.Fprintf(out.stderr, "dlock %s: %s\n", command, errText(err))
		return nil, nil, nil, exitCodeOf(ctx, err)
	}
	if client, err = dlock.New(rdb, opts...); err != nil {
		_ = rdb.Close()
		fmt.Fprintf(out.stderr, "dlock %s: %s\n", command, errText(err))
		return nil, nil, nil, exitCodeOf(ctx, err)
	}
	return client, rdb, func() { _ = client.Close(); _ = rdb.Close() }, 0
}

// exitCodeOf is the exit code of a failure to reach, or use, Redis.
func exitCodeOf(ctx context.Context, err error) int {
	if code, ok := signalExit(ctx); ok {
		return code
	}
	switch {
	case errors.Is(err, errBadAddress), errors.Is(err, dlock.ErrInvalid):
		return exitUsage
	case errors.Is(err, errAccess), errors.Is(err, dlock.ErrPermission), refusedAccess(err):
		return exitNoPermission
	case errors.Is(err, dlock.ErrWrongType), errors.Is(err, dlock.ErrPermits), errors.Is(err, dlock.ErrUpgrade):
		return exitFailure
	}
	return exitRedis
}
