package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

// dialTimeout bounds connecting, so an unreachable server is an error, not a hang.
const dialTimeout = 3 * time.Second

// redisURL is the --redis flag, else REDIS_URL; empty when neither is set.
func redisURL(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return os.Getenv("REDIS_URL")
}

// connect opens a client for url and checks the server answers.
func connect(ctx context.Context, url string) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("bad Redis URL: %w", err)
	}
	opts.DialTimeout = dialTimeout
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opts)
	pingCtx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	if err := rdb.Ping(pingCtx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", opts.Addr, err)
	}
	return rdb, nil
}
