package dlock_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/family"
	"github.com/dlockio/dlock/internal/scripts"
)

// serverKinds are the family's kinds on a Client's server: all but a
// Redlock's, which runs on masters of its own.
func serverKinds() []family.Kind {
	var kinds []family.Kind
	for _, k := range family.All {
		if !k.Redlock {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// lockOn is k's waiting call on name, made anew for each c: for a group,
// on group(name); for a Semaphore, of permits.
func lockOn(k family.Kind, permits int, group func(string) []string) func(c *dlock.Client, name string, opts ...dlock.Option) func(context.Context) (*dlock.Lease, error) {
	return func(c *dlock.Client, name string, opts ...dlock.Option) func(context.Context) (*dlock.Lease, error) {
		names := []string{name}
		if k.Group {
			names = group(name)
		}
		take := k.Handle(family.Target{Client: c, Permits: permits}, names, opts...)
		return func(ctx context.Context) (*dlock.Lease, error) { return take(ctx, false) }
	}
}

// namesOf are the names of a hold of k under name: two for a group.
func namesOf(k family.Kind, name string) []string {
	if k.Group {
		return []string{name + ":a", name + ":b"}
	}
	return []string{name}
}

// holderOf is the kind whose hold keeps k's waiting call out: a writer for
// a reader, else k itself (nil).
func holderOf(k family.Kind) *family.Kind {
	if k.Mode != family.Shared {
		return nil
	}
	w := family.MustOf(k.Takeover)
	return &w
}

// The registry names the scripts each kind runs: its acquire takes the
// hold, Extend runs its extend, Unlock its release. The explorer and
// dlocktest tell a kind's commands by them.
func TestFamily_EachKindRunsTheScriptsTheRegistryNames(t *testing.T) {
	rdb := backends[0].newRedis(t)
	ran := &scriptsRun{}
	rdb.AddHook(ran)
	c := newClient(t, rdb)
	ctx := ctxFor(t, time.Minute)
	for _, k := range serverKinds() {
		expect := func(what string, want *redis.Script, do func() error) {
			t.Helper()
			ran.take()
			if err := do(); err != nil {
				t.Fatalf("%s: %s: %v", k.Label(), what, err)
			}
			if got := ran.take(); !slices.Contains(got, scripts.Function(want)) {
				t.Errorf("%s: %s ran %v; the registry names %s", k.Label(), what, got, scripts.Function(want))
			}
		}
		var lease *dlock.Lease
		expect("acquire", k.Scripts.Acquire, func() (err error) {
			lease, err = k.Take(ctx, family.Target{Client: c}, namesOf(k, lockName(t)), true)
			return err
		})
		expect("Extend", k.Scripts.Extend, func() error { return lease.Extend(ctx, time.Minute) })
		expect("Unlock", k.Scripts.Release, func() error { return lease.Unlock(ctx) })
	}
}

// scriptsRun records the functions of the scripts commands run.
type scriptsRun struct {
	mu  sync.Mutex
	ran []string
}

func (h *scriptsRun) record(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cmd := range cmds {
		if s := scriptRun(cmd); s != nil {
			h.ran = append(h.ran, scripts.Function(s))
		}
	}
}

// take returns what was recorded, and forgets it.
func (h *scriptsRun) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ran := h.ran
	h.ran = nil
	return ran
}

func (h *scriptsRun) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptsRun) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptsRun) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds...)
		return next(ctx, cmds)
	}
}
