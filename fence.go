package dlock

import "github.com/dlockio/dlock/internal/scripts"

// FenceRetentionTTLs is how long a lock name's fencing counter outlives the
// last token minted from it, in TTLs of the hold that token went to: each
// token sets the counter's expiry anew, so a name no longer used leaves no
// key behind, and one in use keeps its counter.
//
// Tokens do not need the counter to go up (see [Lease.Token]): each is at
// least the Redis server's clock in microseconds. The counter is what keeps
// them going up while the clock is behind the last token, after it stepped
// back; it is kept for as long as the last holder may act on its token,
// and as many TTLs again, for such a clock to catch up.
//
// A [Redlock]'s counters are kept for good: its nodes have clocks of their
// own, and a token taken from a node whose clock runs ahead would be above
// what the others mint from theirs once that node is gone.
const FenceRetentionTTLs = scripts.FenceRetentionTTLs
