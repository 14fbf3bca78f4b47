-- Renew a MultiLock group: only while this owner holds every lock of it.
--
-- KEYS     MultiPartLayout (layout.go) per lock: see multi_lib.lua
-- ARGV[1]  owner token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  '1' from Lease.Extend: may shorten; else (a renewal) only later
--
-- Returns 1 renewed, 0 some lock is no longer held (the lease is lost):
-- nothing is re-created, nor renewed.
--
-- Safe to send twice, and to arrive late: a copy finds the hold this
-- owner's or not (and does nothing); an owner token is never reused, so a
-- copy arriving after the release finds nothing of its owner's. A renewal
-- only ever moves the expiry later: a late one, asking for the TTL before
-- an Extend to a longer one, leaves the longer in place. Only an explicit
-- Extend (ARGV[3] '1') sets a shorter one; a late copy of that is the
-- client's to allow for (Lease.inDoubt).

if not all_held(ARGV[1]) then
  return 0
end
local shorten = may_shorten(ARGV[3])
for i = 1, N do
  local p = part(i)
  extend_key(p.LOCK, ARGV[2], shorten)
end
return 1
