package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// A release hands the lock to one waiter, whichever client it is in: with
// eight waiters in four clients, the waiters get the lock one after the
// other without a single attempt more.
func TestMutex_EachReleaseHandsTheLockToOneWaiterAcrossClients(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const clients, waitersPerClient = 4, 2
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		holder, err := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute)).Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		counters := make([]*attemptCounter, clients)
		for i := range counters {
			// No heartbeat during the test: every attempt is a refusal or a wake-up.
			c := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute), dlock.WithWaiterRefresh(time.Minute))
			counters[i] = countAttempts(c)
			mu := c.Mutex(name)
			for range waitersPerClient {
				wg.Add(1)
				go func() {
					defer wg.Done()
					lease, err := mu.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if err := lease.Unlock(ctx); err != nil {
						t.Error(err)
					}
				}()
			}
		}
		// Each waiter's last refusal registers it (without a heartbeat, once).
		// Wait until every client has seen the reply to each of those.
		for _, c := range counters {
			waitDone(t, c.registeredReach(waitersPerClient), 30*time.Second, "every waiter registered")
		}
		var refusedBefore int64
		for _, c := range counters {
			refusedBefore += c.refused.Load()
		}
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		var acquired, refused int64
		for _, c := range counters {
			acquired += c.acquired.Load()
			refused += c.refused.Load()
		}
		if acquired != 0 || refused != refusedBefore {
			t.Fatalf("%d attempts acquired, %d refused after the first release; want 0 and 0: every lock handed over",
				acquired, refused-refusedBefore)
		}
	})
}

// When the subscriber connection is killed, go-redis reconnects and
// resubscribes, and a release after that wakes the waiter again.
func TestMutex_WaiterIsWokenAfterSubscriberReconnects(t *testing.T) {
	srv := startServer(t)
	admin := srv.Client()
	ctx := ctxFor(t, 30*time.Second)
	name := lockName(t)
	holder, err := newClient(t, srv.Client(), dlock.WithTTL(time.Minute)).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiter := newClient(t, srv.Client(), dlock.WithTTL(time.Minute))
	attempts := countAttempts(waiter)
	acquired := lockInBackground(ctx, waiter.Mutex(name).Lock)
	waitDone(t, attempts.refusedReach(2), 10*time.Second, "the waiter waiting")
	if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	_, _, channel := dlock.KeysOf(dlock.DefaultPrefix, name)
	waitSubscribed(t, ctx, admin, channel)
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	expectAcquired(t, acquired, 15*time.Second, "the waiter was not woken after its subscriber reconnected")
}

// waitSubscribed waits until the server counts a subscriber on a lock's
// channel, or on a client's own channel of it (where a Mutex's waiters
// listen): the reconnection happens inside go-redis, and this is where it
// shows.
func waitSubscribed(t *testing.T, ctx context.Context, rdb *redis.Client, channel string) {
	t.Helper()
	eventually(t, ctx, "the subscription coming back", func() bool {
		return len(rdb.PubSubChannels(ctx, channel).Val()) > 0 || len(rdb.PubSubChannels(ctx, channel+":*").Val()) > 0
	})
}

// A release may pick a waiter that died without leaving: nobody answers its
// wake-up. The others find the lock free at their next refresh, long before
// the old holder's TTL would have run out.
func TestMutex_WakeUpSentToADeadWaiterDelaysOthersOneRefreshAtMost(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		const refresh = 2 * time.Second
		name := lockName(t)
		ctx := ctxFor(t, 30*time.Second)
		rdb := b.newRedis(t)
		holder, err := newClient(t, rdb, dlock.WithTTL(time.Minute)).Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		waiter := newClient(t, b.newRedis(t), dlock.WithWaiterRefresh(refresh))
		attempts := countAttempts(waiter)
		acquired := lockInBackground(ctx, waiter.Mutex(name).Lock)
		waitDone(t, attempts.registeredReach(1), 10*time.Second, "the waiter registered")

		// A ghost registered after the waiter but expiring sooner is picked first.
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		lock, _, _ := dlock.KeysOf(dlock.DefaultPrefix, name)
		ghost := redis.Z{Score: float64(now.Add(refresh).UnixMilli()), Member: "ghost"}
		if err := rdb.ZAdd(ctx, lock+":waiters", ghost).Err(); err != nil {
			t.Fatal(err)
		}
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		expectAcquired(t, acquired, 15*time.Second, "the live waiter was stranded by a wake-up sent to a dead one")
	})
}

// However many locks a Client waits on, it listens on one connection per
// shard, and its waiters give up when it closes.
func TestClient_OneSubscriberConnectionForAllWaiters(t *testing.T) {
	const locks = 8
	srv := startServer(t)
	admin := srv.Client()
	ctx := ctxFor(t, 30*time.Second)
	holders := newClient(t, srv.Client(), dlock.WithTTL(time.Minute))
	waiters := newClient(t, srv.Client(), dlock.WithTTL(time.Minute))
	attempts := countAttempts(waiters)
	results := make([]<-chan error, locks)
	for i := range results {
		name := lockName(t)
		if _, err := holders.Mutex(name).Lock(ctx); err != nil {
			t.Fatal(err)
		}
		results[i] = lockInBackground(ctx, waiters.Mutex(name).Lock)
	}
	waitDone(t, attempts.refusedReach(2*locks), 10*time.Second, "every waiter waiting")
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := subscribedConnections(list); n != 1 {
		t.Fatalf("%d connections subscribed, want 1:\n%s", n, list)
	}
	if n := dlock.SubscriberGoroutines(waiters); n != 1 {
		t.Fatalf("%d subscriber goroutines, want 1", n)
	}
	if err := waiters.Close(); err != nil {
		t.Fatal(err)
	}
	for _, result := range results {
		select {
		case err := <-result:
			if !errors.Is(err, dlock.ErrClosed) || !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("a Lock waiting when its Client closed: %v, want ErrNotAcquired and ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a Lock kept waiting after its Client closed")
		}
	}
}

// subscribedConnections counts the connections of a CLIENT LIST reply that
// hold a subscription.
func subscribedConnections(clientList string) int {
	n := 0
	for line := range strings.SplitSeq(strings.TrimSpace(clientList), "\n") {
		for field := range strings.FieldsSeq(line) {
			key, value, _ := strings.Cut(field, "=")
			if (key == "sub" || key == "ssub") && value != "0" {
				n++
				break
			}
		}
	}
	return n
}
