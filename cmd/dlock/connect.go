package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// dialTimeout bounds connecting, so an unreachable server is an error, not a hang.
const dialTimeout = 3 * time.Second

const defaultRedisURL = "redis://127.0.0.1:6379"

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

// parseRedisURL reads a redis:// or rediss:// URL, or several separated by
// commas (the nodes of a cluster; user, password and TLS come from the first).
func parseRedisURL(url string) (*dialer, error) {
	urls := strings.Split(url, ",")
	opts, err := redis.ParseURL(strings.TrimSpace(urls[0]))
	if err != nil {
		return nil, fmt.Errorf("bad Redis URL: %w", err)
	}
	opts.DialTimeout = dialTimeout
	opts.ContextTimeoutEnabled = true
	d := &dialer{opts: opts, addrs: []string{opts.Addr}, cluster: len(urls) > 1}
	for _, u := range urls[1:] {
		more, err := redis.ParseURL(strings.TrimSpace(u))
		if err != nil {
			return nil, fmt.Errorf("bad Redis URL: %w", err)
		}
		d.addrs = append(d.addrs, more.Addr)
	}
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
func connect(ctx context.Context, url string) (*dialer, redis.UniversalClient, error) {
	d, err := parseRedisURL(url)
	if err != nil {
		return nil, nil, err
	}
	rdb := d.client()
	pingCtx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	info, err := rdb.Info(pingCtx, "cluster").Result()
	if err != nil {
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("cannot reach Redis at %s: %w", d, err)
	}
	if !d.cluster && strings.Contains(info, "cluster_enabled:1") {
		_ = rdb.Close()
		d.cluster = true
		rdb = d.client()
	}
	return d, rdb, nil
}
