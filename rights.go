package dlock

import (
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/scripts"
)

// rightsSeen is what one Redis connection's user is known to be allowed:
// the acquire scripts whose check of their lock type's commands passed
// there (rights_refused in common.lua). That check cost a restricted user
// about a quarter of each acquire; once it has passed, acquires send
// scripts.RightsKnown and skip it, but for those that register a waiter
// (see call.argv). Rights taken away later are found by the command Redis
// refuses: the attempt gives back what it took (its abandon, as after any
// error) and fails with ErrPermission, and every refusal makes the next
// acquires check again.
//
// A Client's user is one, so is its record, for all of a cluster's nodes:
// a node that grants less (ACLs set node by node) is found as rights taken
// away are.
type rightsSeen struct {
	known sync.Map // *redis.Script → struct{}
}

// The last ARGV of an acquire, boxed once.
var (
	rightsKnown any = scripts.RightsKnown
	rightsCheck any = ""
)

// arg is the last ARGV of an acquire of script: scripts.RightsKnown once
// its check has passed, else "" (check).
func (r *rightsSeen) arg(script *redis.Script) any {
	if _, ok := r.known.Load(script); ok {
		return rightsKnown
	}
	return rightsCheck
}

// passed records that an acquire of script, sent with the check, was
// answered: the check passed.
func (r *rightsSeen) passed(script *redis.Script) {
	r.known.Store(script, struct{}{})
}

// refused forgets every script's check when err is a refusal (ACL): the
// user's rights changed, or differ on this node.
func (r *rightsSeen) refused(err error) {
	if isPermission(err) {
		r.known.Clear()
	}
}
