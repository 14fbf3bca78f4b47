//go:build faults

package faults

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
)

// TestLinearCheck_AMultiLockUnlockRefusedForOneLockReleasedTheOthers: the
// "linearizable" false alarm of a soak's seeds 1795707226476120089 and
// 1795707226476120217 (a MultiLock on a Redis cluster, its Unlock slowed
// by network latency or a paused master). A MultiLock's Unlock releases
// every lock it still holds and answers ErrNotHeld when any one was no
// longer its own. Here the release of its first slot's lock goes through,
// another client takes that lock at once, and the release of the second
// slot's is held up past the lease's deadline, finds that lock expired,
// and is refused. The checker recorded the refusal for every name of the
// MultiLock: on the first lock, a hold still counted on (its lapse was
// to come) that no release ended, and yet another's grant with a higher
// token. One refused lock says nothing of the others: the Unlock is of
// unknown outcome for each of them.
func TestLinearCheck_AMultiLockUnlockRefusedForOneLockReleasedTheOthers(t *testing.T) {
	c := redistest.StartCluster(t, clusterUser()...)
	ctx := ctxFor(t, time.Minute)
	first, second := twoSlots(ctx, t, c.Client(), lockName(t))
	held := &heldRelease{key: lockKey(second), arrived: make(chan struct{}), release: make(chan struct{})}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ReadTimeout: 10 * time.Second,
		Username: aclUser, Password: aclPassword, MaxRedirects: 3})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(beforeSending(held.hold))
	other := newClient(t, c.Client())
	rec := &leaseRecorder{start: time.Now()}
	multi := op{Kind: "multi", Names: []string{first, second}}
	mutex := op{Kind: "mutex", Names: []string{first}}

	asked := time.Now()
	lease, err := newClient(t, rdb).MultiLock(multi.Names, dlock.WithLeaseTime(2*time.Second)).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	held.armed.Store(true)
	unlocked := make(chan error, 1)
	go func() { unlocked <- timedUnlock(ctx, rec, 0, "multi", multi, lease) }()
	<-held.arrived // the first lock released, the second's release held up

	asked2 := time.Now()
	taken, err := other.Mutex(first).TryLock(ctx)
	if err != nil {
		t.Fatalf("Mutex of the lock the MultiLock released: %v", err)
	}
	rec.acquired(1, "mutex", mutex, asked2, time.Now(), taken, taken.Deadline())
	if !time.Now().Before(lease.Deadline()) {
		t.Fatal("the case needs the Mutex granted before the MultiLock's deadline")
	}
	if taken.Token() <= lease.Tokens()[first] {
		t.Fatalf("Mutex token %d, MultiLock's %d: want higher", taken.Token(), lease.Tokens()[first])
	}

	<-lease.Done()
	// The deadline passed: Redis expires the second lock a moment later,
	// which the test does at once.
	if err := c.Client().Del(ctx, lockKey(second)).Err(); err != nil {
		t.Fatal(err)
	}
	close(held.release)
	if err := <-unlocked; !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock with one lock expired: %v, want ErrNotHeld", err)
	}
	rec.acquired(0, "multi", multi, asked, granted, lease, lease.Deadline())
	if err := timedUnlock(ctx, rec, 1, "mutex", mutex, taken); err != nil {
		t.Fatal(err)
	}

	var out outcome
	kinds := map[string]string{first: "multi", second: "multi"}
	checkLinearizable(&schedule{params: params{Cluster: true}}, rec, kinds, nil, &out)
	if len(out.violations) != 0 {
		t.Errorf("a MultiLock Unlock refused for one lock, which released the other: %d violations\n%s",
			len(out.violations), strings.Join(out.violations, "\n"))
	}
	if out.checks != 2 {
		t.Errorf("%d names checked, want 2", out.checks)
	}
}

// twoSlots returns two lock names of prefix on different slots, the
// first in the slot a MultiLock releases first (the lower).
func twoSlots(ctx context.Context, t *testing.T, rdb *redis.ClusterClient, prefix string) (string, string) {
	names := []string{prefix + ":a", prefix + ":b"}
	slots := make([]int64, len(names))
	for i, name := range names {
		slots[i] = rdb.ClusterKeySlot(ctx, lockKey(name)).Val()
	}
	for slots[0] == slots[1] {
		names[1] += "b"
		slots[1] = rdb.ClusterKeySlot(ctx, lockKey(names[1])).Val()
	}
	if slots[0] > slots[1] {
		slices.Reverse(names)
	}
	return names[0], names[1]
}

// heldRelease holds up, once armed, the MultiLock release of the lock
// key, until release closes.
type heldRelease struct {
	key     string
	armed   atomic.Bool
	arrived chan struct{}
	release chan struct{}
}

func (h *heldRelease) hold(cmds []redis.Cmder) {
	if !h.armed.Load() {
		return
	}
	for _, c := range cmds {
		args := c.Args()
		if len(args) > 3 && scripts.Of(argString(args[1])) == scripts.MultiRelease && slices.ContainsFunc(args[3:], func(a any) bool {
			return argString(a) == h.key
		}) {
			h.armed.Store(false)
			close(h.arrived)
			<-h.release
			return
		}
	}
}
