package dlock

import (
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/fcall"
	"github.com/dlockio/dlock/internal/scripts"
)

// rightsSeen records the acquire scripts whose rights check (rights_refused
// in common.lua) passed for this Client's user; later acquires skip it but
// for registrations and an unclean RWMutex (rw_acquire.lua). A right taken
// away later is a refused command: the attempt gives back what it took.
type rightsSeen struct{ known sync.Map }

var rightsKnown, rightsCheck any = scripts.RightsKnown, ""

// arg is the last ARGV of an acquire of script, boxed once:
// scripts.RightsKnown once its check has passed, else "" (check).
func (r *rightsSeen) arg(script *redis.Script) any {
	if _, ok := r.known.Load(script); ok {
		return rightsKnown
	}
	return rightsCheck
}

// withRights is args followed by an acquire's rights flag (see arg).
type withRights[A scripts.Args] struct {
	args A
	flag any
}

func (w withRights[A]) Append(argv []any) []any { return append(w.args.Append(argv), w.flag) }

// passed records that an acquire of script passed the check.
func (r *rightsSeen) passed(script *redis.Script) {
	r.known.Store(script, struct{}{})
}

// refused forgets every script's check when err is a refusal (ACL): the
// user's rights changed, or differ on this node.
func (r *rightsSeen) refused(err error) {
	if fcall.IsPermission(err) {
		r.known.Clear()
	}
}
