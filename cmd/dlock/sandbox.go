package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// sandboxCleanup bounds deleting what a demo or bench wrote, also after
// a signal ended it.
const sandboxCleanup = 10 * time.Second

// sandbox is where the demo and the bench write: an embedded Redis, unless
// the user named a server with --redis (REDIS_URL, set for `dlock run` in
// an operator's shell, is not enough: it may be a production server); there,
// a key prefix of their own whose keys they delete when they end.
type sandbox struct {
	newRedis func() redis.UniversalClient // a client of the server, with a connection of its own
	where    string                       // the server, for the header line
	embedded bool
	prefix   string // of every key written: dlock.WithPrefix
	stop     func() // stops the embedded server
}

// openSandbox opens the server at url, or an embedded one when url is "".
func openSandbox(ctx context.Context, url string) (*sandbox, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	s := &sandbox{prefix: "dlock-sandbox-" + hex.EncodeToString(b[:]) + ":", stop: func() {}}
	if url == "" {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true) // TTLs run on the real clock, as a lock's must
		if err := m.Start(); err != nil {
			return nil, fmt.Errorf("starting the embedded Redis: %w", err)
		}
		addr := m.Addr()
		s.newRedis = func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: addr}) }
		s.where, s.embedded, s.stop = "an embedded Redis (miniredis)", true, m.Close
		if os.Getenv("REDIS_URL") != "" {
			s.where += "; REDIS_URL is not used, --redis runs it on a server"
		}
		return s, nil
	}
	d, probe, err := connect(ctx, url)
	if err != nil {
		return nil, err
	}
	_ = probe.Close()
	s.newRedis, s.where = d.client, "Redis at "+d.String()
	return s, nil
}

// close deletes every key under the sandbox's prefix, on every master of a
// cluster, even when ctx has ended (a signal): the workers, which wrote
// them, have stopped by now. It says on out when it could not.
func (s *sandbox) close(ctx context.Context, command string, out *output) {
	defer s.stop()
	if s.embedded {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sandboxCleanup)
	defer cancel()
	rdb := s.newRedis()
	defer rdb.Close()
	var err error
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		err = cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return deleteKeys(ctx, node, s.prefix)
		})
	} else {
		err = deleteKeys(ctx, rdb, s.prefix)
	}
	if err != nil {
		fmt.Fprintf(out.stderr, "dlock %s: deleting its keys %s*: %v\n", command, s.prefix, err)
	}
}

// deleteKeys deletes the keys starting with prefix (no glob characters) on
// one server. One DEL per key: a cluster node refuses a DEL of keys in
// different slots.
func deleteKeys(ctx context.Context, rdb redis.Cmdable, prefix string) error {
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, key := range keys {
					p.Del(ctx, key)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}
