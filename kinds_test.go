package dlock_test

import (
	"context"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/family"
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
