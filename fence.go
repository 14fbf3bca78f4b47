package dlock

import "github.com/dlockio/dlock/internal/scripts"

// FenceRetentionTTLs is how long a lock name's fencing counter outlives the
// last token minted from it, in TTLs of the hold that token went to, so a
// name no longer used leaves no key behind. Tokens do not need the counter
// to go up (see [Lease.Token]); it keeps them going up while the server's
// clock is behind the last token. A [Redlock]'s counters are kept for good,
// since its nodes' clocks differ (docs/SAFETY.md).
const FenceRetentionTTLs = scripts.FenceRetentionTTLs
