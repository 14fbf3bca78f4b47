-- Extend one hold of an RWMutex or ReentrantMutex to a new TTL (renewal and
-- Lease.Extend). The owner's other holds keep their own expiry.
--
-- KEYS     STATE, HOLDS: RWLayout (layout.go) up to WWAIT, as in rw_lib.lua
-- ARGV     in the order of ExtendArgs (args.go), by these names:
-- OWNER    member of the hold
-- HOLD_TTL new TTL in milliseconds
-- SHORTEN  '1' from Lease.Extend: may shorten; else (a renewal) only later
--
-- Returns 1 extended, 0 not held (also when the state is gone), or
-- WRONGTYPE when another program wrote over the state, which is left as
-- it is (its expiry too).
--
-- Never brings back a hold that expired or was released: someone else may
-- already have been told the lock was free.
--
-- Safe to send twice, and to arrive late: a copy finds the hold this
-- owner's or not (and does nothing); an owner token is never reused, so a
-- copy arriving after the release finds nothing of its owner's. A renewal
-- only ever moves the expiry later: a late one, asking for the TTL before
-- an Extend to a longer one, leaves the longer in place. Only an explicit
-- Extend (SHORTEN '1') sets a shorter one; a late copy of that is the
-- client's to allow for (Lease.inDoubt).

local now = server_now()
if not live_score(HOLDS, OWNER, now) then
  return 0
end
if not is_dlocks_state(STATE) then
  -- Gone (DEL, FLUSHDB, an eviction): the hold went with its count, as a
  -- Mutex's goes with its key, and the next acquire drops it.
  return foreign_state(STATE) or 0
end
extend_score(HOLDS, OWNER, now + tonumber(HOLD_TTL), may_shorten(SHORTEN))
expire_with_last()
return 1
