-- Renew a MultiLock group: only while this owner holds every lock of it.
--
-- KEYS     MultiPartLayout (layout.go) key by key: see multi_lib.lua
-- ARGV     in the order of ExtendArgs (args.go), by these names:
-- OWNER    owner token
-- HOLD_TTL TTL in milliseconds
-- SHORTEN  '1' from Lease.Extend: may shorten; else (a renewal) only later
--
-- Returns 1 renewed, 0 some lock is no longer held (the lease is lost):
-- nothing is re-created, nor renewed.
--
-- Safe to send twice, and to arrive late: a copy finds the hold this
-- owner's or not (and does nothing); an owner token is never reused, so a
-- copy arriving after the release finds nothing of its owner's. A renewal
-- only ever moves the expiry later: a late one, asking for the TTL before
-- an Extend to a longer one, leaves the longer in place. Only an explicit
-- Extend (SHORTEN '1') sets a shorter one; a late copy of that is the
-- client's to allow for (Lease.inDoubt).

if not all_held(OWNER) then
  return 0
end
local shorten = may_shorten(SHORTEN)
for i = 1, N do
  extend_key((part(i)), HOLD_TTL, shorten)
end
return 1
