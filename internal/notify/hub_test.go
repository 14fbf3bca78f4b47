package notify

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
)

func setup(t *testing.T, linger time.Duration) (context.Context, *redis.Client, *Hub) {
	rdb := redistest.Start(t).Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	hub := New(Config{Client: rdb, Linger: linger})
	t.Cleanup(func() { _ = hub.Close() })
	return ctx, rdb, hub
}

func watch(t *testing.T, ctx context.Context, hub *Hub, channel string) *Waiter {
	t.Helper()
	w, err := hub.Watch(ctx, channel)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

func expectWoken(t *testing.T, w *Waiter) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken")
	}
}

func expectAsleep(t *testing.T, w *Waiter) {
	t.Helper()
	select {
	case <-w.C():
		t.Fatal("waiter woken by a message not for it")
	default:
	}
}

func subscribers(t *testing.T, ctx context.Context, rdb *redis.Client, channel string) int64 {
	t.Helper()
	counts, err := rdb.PubSubNumSub(ctx, channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	return counts[channel]
}

// A subscription Redis refuses for lack of permission (ACL) is Watch's
// error, for each waiter that waited for it; another channel the user may
// have is subscribed as ever.
func TestHub_ARefusedSubscriptionIsWatchsError(t *testing.T) {
	ctx, rdb, _ := setup(t, 0)
	if err := rdb.Do(ctx, "ACL", "SETUSER", "app", "on", ">pw", "resetchannels", "&app:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	user := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, Username: "app", Password: "pw"})
	t.Cleanup(func() { _ = user.Close() })
	hub := New(Config{Client: user})
	t.Cleanup(func() { _ = hub.Close() })
	for range 2 {
		if w, err := hub.Watch(ctx, "dlock:ch"); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Fatalf("Watch of a channel refused: %v, %v; want the NOPERM refusal", w, err)
		}
	}
	if w := watch(t, ctx, hub, "app:ch"); !w.Subscribed() {
		t.Fatal("Watch of a channel allowed returned unsubscribed")
	}
}

// Watch returns only once the server has the subscription: a message
// published right after is delivered.
func TestHub_WatchReturnsOnceTheServerHasTheSubscription(t *testing.T) {
	ctx, rdb, hub := setup(t, 0)
	w := watch(t, ctx, hub, "ch")
	if !w.Subscribed() {
		t.Fatal("Watch returned unsubscribed")
	}
	if n := subscribers(t, ctx, rdb, "ch"); n != 1 {
		t.Fatalf("server counts %d subscribers after Watch, want 1", n)
	}
	rdb.Publish(ctx, "ch", w.ID())
	expectWoken(t, w)
}

func TestHub_AMessageWakesTheWaiterItNames(t *testing.T) {
	ctx, rdb, hub := setup(t, 0)
	first, second := watch(t, ctx, hub, "ch"), watch(t, ctx, hub, "ch")
	rdb.Publish(ctx, "ch", first.ID())
	expectWoken(t, first)
	expectAsleep(t, second) // messages are handled in order: the first's is done
	rdb.Publish(ctx, "ch", "someone-elsewhere")
	rdb.Publish(ctx, "ch", second.ID())
	expectWoken(t, second)
	expectAsleep(t, first)
}

// What a release publishes after a waiter's id and a colon reaches that
// waiter, once; a later bare wake-up leaves an unread grant in place.
func TestHub_GrantAfterTheIdReachesItsWaiter(t *testing.T) {
	ctx, rdb, hub := setup(t, 0)
	w, other := watch(t, ctx, hub, "ch"), watch(t, ctx, hub, "ch")
	rdb.Publish(ctx, "ch", w.ID()+":7:2000")
	expectWoken(t, w)
	expectAsleep(t, other)
	if g := w.Grant(); g != "7:2000" {
		t.Fatalf("grant %q, want \"7:2000\"", g)
	}
	if g := w.Grant(); g != "" {
		t.Fatalf("grant %q read twice", g)
	}
	rdb.Publish(ctx, "ch", w.ID()+":8:1000")
	rdb.Publish(ctx, "ch", w.ID())
	expectWoken(t, w)
	if g := w.Grant(); g != "8:1000" {
		t.Fatalf("grant %q after a bare wake-up, want \"8:1000\" kept", g)
	}
}

func TestHub_WakeAllWakesEveryWaiter(t *testing.T) {
	ctx, rdb, hub := setup(t, 0)
	waiters := []*Waiter{watch(t, ctx, hub, "ch"), watch(t, ctx, hub, "ch"), watch(t, ctx, hub, "ch")}
	rdb.Publish(ctx, "ch", WakeAll)
	for _, w := range waiters {
		expectWoken(t, w)
	}
}

// The last waiter's departure leaves the subscription for the linger time,
// so the next waiter finds it ready; after that it goes.
func TestHub_SubscriptionLingersAfterTheLastWaiter(t *testing.T) {
	ctx, rdb, hub := setup(t, 200*time.Millisecond)
	w, err := hub.Watch(ctx, "ch")
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if !hub.Ready("ch") || subscribers(t, ctx, rdb, "ch") != 1 {
		t.Fatal("the subscription went with its last waiter")
	}
	for subscribers(t, ctx, rdb, "ch") != 0 {
		select {
		case <-ctx.Done():
			t.Fatal("an idle subscription was never dropped")
		case <-time.After(20 * time.Millisecond): // polling the server's count
		}
	}
	if hub.Ready("ch") {
		t.Fatal("hub reports a dropped subscription as ready")
	}
	w = watch(t, ctx, hub, "ch") // subscribes afresh
	rdb.Publish(ctx, "ch", w.ID())
	expectWoken(t, w)
}

// A linger timer that fired while a waiter came and went is stale: the
// timer started as that waiter left decides when to unsubscribe.
func TestHub_AStaleLingerTimerLeavesTheSubscription(t *testing.T) {
	ctx, _, hub := setup(t, time.Hour)
	watch(t, ctx, hub, "ch").Close() // starts the first linger timer
	sh, err := hub.shardFor(ctx, "ch")
	if err != nil {
		t.Fatal(err)
	}
	sh.mu.Lock()
	tp, first := sh.topics["ch"], sh.topics["ch"].idle
	sh.mu.Unlock()
	watch(t, ctx, hub, "ch").Close() // stops it, too late had it fired, and starts another
	sh.mu.Lock()
	sh.unsubscribeIdle("ch", tp, first) // the first timer's callback, run late
	if !hub.Ready("ch") {
		t.Fatal("a stale linger timer dropped the subscription before its successor's time")
	}
}

func TestHub_CloseStopsItsGoroutines(t *testing.T) {
	ctx, _, hub := setup(t, 0)
	watch(t, ctx, hub, "a")
	watch(t, ctx, hub, "b")
	if n := hub.Goroutines(); n != 1 {
		t.Fatalf("%d subscriber goroutines for one server, want 1", n)
	}
	if err := hub.Close(); err != nil {
		t.Fatal(err)
	}
	if n := hub.Goroutines(); n != 0 {
		t.Fatalf("%d subscriber goroutines after Close", n)
	}
	if _, err := hub.Watch(ctx, "c"); err != ErrClosed {
		t.Fatalf("Watch after Close: %v, want ErrClosed", err)
	}
}

// eventually polls cond, which only asking can tell (the hub's count, the
// server's), until it holds.
func eventually(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not happen", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A shard whose last channel went closes its connection and stops its
// goroutine; the next waiter gets a new one.
func TestHub_IdleShardIsClosed(t *testing.T) {
	ctx, rdb, hub := setup(t, 50*time.Millisecond)
	w, err := hub.Watch(ctx, "ch")
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	eventually(t, ctx, "closing the idle shard", func() bool { return hub.Goroutines() == 0 })
	eventually(t, ctx, "the subscriber's disconnection", func() bool {
		clients, err := rdb.ClientList(ctx).Result()
		return err == nil && !strings.Contains(clients, "cmd=subscribe") && !strings.Contains(clients, "cmd=unsubscribe")
	})
	w = watch(t, ctx, hub, "ch")
	rdb.Publish(ctx, "ch", w.ID())
	expectWoken(t, w)
}

// Waiters that come as their shard is being retired (its last channel
// unsubscribed at once) land on a live shard and are woken.
func TestHub_WatchRacingARetiringShardIsWoken(t *testing.T) {
	ctx, rdb, hub := setup(t, time.Nanosecond)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			channel := fmt.Sprintf("ch%d", g%2)
			for range 50 {
				w, err := hub.Watch(ctx, channel)
				if err != nil {
					t.Error(err)
					return
				}
				if !w.Subscribed() {
					t.Error("Watch returned unsubscribed")
				}
				rdb.Publish(ctx, channel, w.ID())
				select {
				case <-w.C():
				case <-ctx.Done():
					t.Error("a waiter was never woken")
				}
				w.Close()
			}
		}()
	}
	wg.Wait()
}

// A master that fails over leaves the cluster's layout: its shard's
// waiters are woken and told they are no longer subscribed (so they watch
// again), and once they have gone the shard goes too; watching again
// subscribes on the new master, where the channel's messages now go.
func TestHub_ShardOfAFailedOverMasterIsDropped(t *testing.T) {
	c := redistest.StartReplicatedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	rdb := c.Client()
	hub := New(Config{Client: rdb, Sharded: true, Linger: 50 * time.Millisecond})
	t.Cleanup(func() { _ = hub.Close() })
	const channel = "{failover}ch"
	master, err := c.SlotOwner(ctx, int(rdb.ClusterKeySlot(ctx, channel).Val()))
	if err != nil {
		t.Fatal(err)
	}
	old := c.Nodes[master].Addr()
	w, err := hub.Watch(ctx, channel)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Subscribed() {
		t.Fatal("Watch returned unsubscribed")
	}
	if err := c.FailOver(ctx, master); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the waiter losing its subscription", func() bool { return !w.Subscribed() })
	expectWoken(t, w)
	w.Close()
	eventually(t, ctx, "dropping the old master's shard", func() bool {
		hub.mu.Lock()
		defer hub.mu.Unlock()
		return hub.shards[old] == nil
	})
	w = watch(t, ctx, hub, channel)
	if err := rdb.SPublish(ctx, channel, w.ID()).Err(); err != nil {
		t.Fatal(err)
	}
	expectWoken(t, w)
}
