package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
)

// scriptRecorder is a go-redis hook that keeps the KEYS of every script a
// client runs, by the script's SHA.
type scriptRecorder struct {
	mu   sync.Mutex
	keys map[string][][]string // SHA → the KEYS of each run
}

func (r *scriptRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *scriptRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.record(cmd)
		return next(ctx, cmd)
	}
}

func (r *scriptRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			r.record(cmd)
		}
		return next(ctx, cmds)
	}
}

func (r *scriptRecorder) record(cmd redis.Cmder) {
	args := cmd.Args()
	name, _ := args[min(1, len(args)-1)].(string)
	script := scripts.Of(name)
	if (cmd.Name() != "fcall" && cmd.Name() != "evalsha") || script == nil || len(args) < 3 {
		return
	}
	sha := script.Hash()
	n, _ := args[2].(int)
	keys := make([]string, 0, n)
	for _, k := range args[3 : 3+n] {
		keys = append(keys, k.(string))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys[sha] = append(r.keys[sha], keys)
}

// Every script takes its KEYS where its layout names them in Lua
// (internal/scripts/layout.go): each key a lock's key and the suffix the
// layout gives, a call's own key (tombstone, release mark) named after
// the lock, and none beyond the layout. Go makes every list of KEYS by the
// layouts too; this checks, on what every type sends, that the lists it
// makes (split around a tombstone, shared between scripts, cut short for
// a Redlock) still put each key where the script reads it.
func TestScriptLayouts_NameTheKeysEveryTypeSends(t *testing.T) {
	srv := redistest.Start(t)
	rec := &scriptRecorder{keys: make(map[string][][]string)}
	rdb := srv.Client()
	rdb.AddHook(rec)
	t.Cleanup(func() { rdb.Close() })
	c, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	briefly := WithWait(50 * time.Millisecond) // a second Lock that waits, registers, and gives up

	// exercise takes a lock, has a second Lock wait for it and give up
	// (abandon), extends the first, asks its TTL and unlocks it.
	exercise := func(what string, lock func(context.Context) (*Lease, error), waiter func(context.Context) (*Lease, error)) {
		t.Helper()
		l, err := lock(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if _, err := waiter(ctx); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("%s: a waiter got %v, want ErrNotAcquired", what, err)
		}
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("%s: Extend: %v", what, err)
		}
		if _, err := l.TTL(ctx); err != nil {
			t.Fatalf("%s: TTL: %v", what, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock: %v", what, err)
		}
	}
	exercise("Mutex", c.Mutex("m", WithHolderInfo(admin.HolderInfo{Program: "layout"})).Lock, c.Mutex("m", briefly).Lock)
	exercise("FairMutex", c.FairMutex("f").Lock, c.FairMutex("f", briefly).Lock)
	exercise("Semaphore", c.Semaphore("s", 1).Acquire, c.Semaphore("s", 1, briefly).Acquire)
	exercise("RWMutex", c.RWMutex("rw").Lock, c.RWMutex("rw", briefly).RLock)
	exercise("ReentrantMutex", c.ReentrantMutex("re").Lock, c.ReentrantMutex("re", briefly).Lock)
	exercise("MultiLock", c.MultiLock([]string{"m1", "m2", "m3"}).Lock, c.MultiLock([]string{"m2", "m4"}, briefly).Lock)
	e := c.Election("e")
	exercise("Election", func(ctx context.Context) (*Lease, error) { return e.Campaign(ctx, "one") },
		func(ctx context.Context) (*Lease, error) { return c.Election("e", briefly).Campaign(ctx, "two") })
	if _, err := e.Campaign(ctx, "three"); err != nil {
		t.Fatal(err)
	}
	if err := e.Proclaim(ctx, "four"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Semaphore("s", 1).SetPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RWMutex("rw").Inspect(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Describe(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceUnlock(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	var nodes []redis.UniversalClient
	for _, node := range redistest.StartMasters(t, 3) {
		rdb := node.Client()
		rdb.AddHook(rec)
		t.Cleanup(func() { rdb.Close() })
		nodes = append(nodes, rdb)
	}
	r, err := NewRedlock(nodes, WithRestartGuard(0))
	if err != nil {
		t.Fatal(err)
	}
	exercise("Redlock", r.Mutex("r").Lock, r.Mutex("r", briefly).Lock)

	for name, script := range scriptsOfEveryType {
		// A Redlock's give-back of a cut-short Lock may still be recording.
		rec.mu.Lock()
		runs := slices.Clone(rec.keys[script.Hash()])
		rec.mu.Unlock()
		if len(runs) == 0 {
			t.Errorf("%s never ran: its KEYS are not checked", name)
		}
		for _, keys := range runs {
			if err := keysMatchLayout(script, scripts.LayoutOf(script), keys); err != nil {
				t.Errorf("%s, KEYS %q: %v", name, keys, err)
			}
		}
	}
}

// keysMatchLayout says where keys, sent to script, are not where layout
// names them.
func keysMatchLayout(script *redis.Script, layout scripts.Layout, keys []string) error {
	part := len(layout) // a MultiLock script's keys are parts, key by key, then the tail
	if isMultiScript(script) {
		part = len(scripts.MultiPartLayout)
	}
	if len(keys) == 0 {
		return fmt.Errorf("no KEYS")
	}
	lock := strings.TrimSuffix(keys[0], layout[0].Suffix)
	parts := 1
	if isMultiScript(script) {
		parts = len(keys) / part // the tail is shorter than a part
	}
	for i, key := range keys {
		at, base := i, lock
		if i < parts*part {
			at = i / parts
			base = strings.TrimSuffix(keys[i%parts], layout[0].Suffix)
		} else {
			at = part + i - parts*part
		}
		if at >= len(layout) {
			return fmt.Errorf("key %d beyond the layout", i+1)
		}
		k := layout[at]
		want := base + k.Suffix
		if k.PerCall {
			if !strings.HasPrefix(key, want) || len(key) != len(want)+32 {
				return fmt.Errorf("key %d, %s, is %q: want %q and a hash", i+1, k.Lua, key, want)
			}
			continue
		}
		if key != want {
			return fmt.Errorf("key %d, %s, is %q: want %q", i+1, k.Lua, key, want)
		}
	}
	return nil
}

func isMultiScript(s *redis.Script) bool {
	switch s {
	case scripts.MultiAcquire, scripts.MultiRelease, scripts.MultiExtend, scripts.MultiTTL, scripts.MultiAbandon:
		return true
	}
	return false
}

// scriptsOfEveryType are the scripts the test above runs, by name: all of
// them.
var scriptsOfEveryType = map[string]*redis.Script{
	"MutexAcquire": scripts.MutexAcquire, "MutexRelease": scripts.MutexRelease, "MutexExtend": scripts.MutexExtend,
	"MutexTTL": scripts.MutexTTL, "MutexAbandon": scripts.MutexAbandon,
	"FairAcquire": scripts.FairAcquire, "FairRelease": scripts.FairRelease, "FairAbandon": scripts.FairAbandon,
	"SemAcquire": scripts.SemAcquire, "SemRelease": scripts.SemRelease, "SemExtend": scripts.SemExtend,
	"SemTTL": scripts.SemTTL, "SemAbandon": scripts.SemAbandon, "SemSetPermits": scripts.SemSetPermits,
	"MultiAcquire": scripts.MultiAcquire, "MultiRelease": scripts.MultiRelease, "MultiExtend": scripts.MultiExtend,
	"MultiTTL": scripts.MultiTTL, "MultiAbandon": scripts.MultiAbandon,
	"ElectionAcquire": scripts.ElectionAcquire, "ElectionRelease": scripts.ElectionRelease,
	"ElectionProclaim": scripts.ElectionProclaim, "ElectionLeader": scripts.ElectionLeader,
	"RedlockFence": scripts.RedlockFence,
	"RWAcquire":    scripts.RWAcquire, "RWRelease": scripts.RWRelease, "RWExtend": scripts.RWExtend,
	"RWTTL": scripts.RWTTL, "RWAbandon": scripts.RWAbandon, "RWInspect": scripts.RWInspect,
	"ForceUnlock": scripts.ForceUnlock, "Describe": scripts.Describe,
}

// A Client's tag has the length and start the scripts take it by.
func TestClientTag_HasTheFormTheScriptsRead(t *testing.T) {
	tag := newClientTag()
	if len(tag) != scripts.ClientTagChars || !strings.HasPrefix(tag, scripts.ProtocolTag) {
		t.Fatalf("tag %q; want %d characters starting with %q", tag, scripts.ClientTagChars, scripts.ProtocolTag)
	}
}

// A type whose scripts need more keys or lists than any type has today
// lays them out as one that fits does, rather than panicking (the fixed
// arrays before: index out of range [12] with length 12).
func TestKeyLists_ATypeMayOutgrowTheRoomMadeForToday(t *testing.T) {
	lay := newKeyLists(keysFor("p:", "big"))
	var places []keyList
	for i := range 40 {
		places = append(places, lay.also(fmt.Sprint("extra", i)))
	}
	for i, p := range places {
		if got := lay.list(p); len(got[0]) != 1 || got[0][0] != fmt.Sprint("extra", i) || len(got[1]) != 0 {
			t.Fatalf("list %d: %q; want [[extra%d] []]", i, got, i)
		}
	}
}
