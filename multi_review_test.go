package dlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A MultiLock of 3000 names on one server: before the key-by-key KEYS
// (681960d^1) its acquire unpacked 2N+1 keys at most, and took the group;
// the fast path's EXISTS now unpacks 3N keys of KEYS, past Lua 5.1's stack
// limit (LUAI_MAXCSTACK, 8000), and the acquire fails with "too many
// results to unpack".
func TestMultiLock_ALargeGroupIsTakenAndReleased(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	rdb := startServer(t).Client()
	c := newClient(t, rdb, dlock.WithTTL(time.Minute))
	for _, n := range []int{2600, 3000, 3900} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("big%d-%05d", n, i)
		}
		l, err := c.MultiLock(names).TryLock(ctx)
		if err != nil {
			t.Errorf("TryLock of %d names: ...%s", n, tail(err))
			continue
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock of %d names: ...%s", n, tail(err))
		}
	}
}

// tail is the end of err's message: a MultiLock's error names every lock.
func tail(err error) string {
	msg := err.Error()
	return msg[max(0, len(msg)-160):]
}
