package dlock_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The owner token proves who holds a lock: whoever has it can release the
// lock. It must be random, 128 bits at least, and never leave the process
// through a log line, an error or a printed lease.
func TestLease_OwnerTokenIsRandomAndNeverPrinted(t *testing.T) {
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb, dlock.WithTTL(time.Second), dlock.WithLogger(logger))
	ctx := ctxFor(t, 30*time.Second)
	name := lockName(t)

	lease, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := rdb.Get(ctx, lockKey(name)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32,}$`).MatchString(owner) {
		t.Fatalf("owner token %d characters of %q: want 128+ random bits in hex", len(owner), owner[:min(4, len(owner))])
	}
	other, _ := c.Mutex(lockName(t)).Lock(ctx)
	otherOwner := rdb.Get(ctx, lockKey(other.Name())).Val()
	if otherOwner == owner {
		t.Fatal("two acquisitions share an owner token")
	}
	_ = other.Unlock(ctx)

	// Make the lease fail in every way it reports: lost, then refused.
	rdb.Del(ctx, lockKey(name))
	waitDone(t, lease.Done(), lossGuard, "loss of the lease")
	var printed []string
	for _, err := range []error{lease.Err(), lease.Extend(ctx, time.Second), lease.Unlock(ctx)} {
		if err == nil {
			t.Fatal("expected an error from a lost lease")
		}
		printed = append(printed, err.Error(), fmt.Sprintf("%+v", err))
	}
	_, ttlErr := lease.TTL(ctx)
	if !errors.Is(ttlErr, dlock.ErrNotHeld) {
		t.Fatalf("TTL of a lost lease: %v", ttlErr)
	}
	printed = append(printed, ttlErr.Error(), fmt.Sprint(lease), fmt.Sprintf("%+v %#v", lease, lease), logs.String())
	if !strings.Contains(logs.String(), "lease lost") {
		t.Fatalf("the loss was not logged; logs:\n%s", logs.String())
	}
	for _, s := range printed {
		if strings.Contains(s, owner) {
			t.Fatalf("the owner token leaked into: %s", s)
		}
	}
}
