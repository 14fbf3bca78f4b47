-- Renew a Semaphore permit: only while this owner holds it.
--
-- KEYS     HOLDERS, TOKENS, PERMITS: SemLayout (layout.go) up to WAITERS, as
--          in sem_lib.lua
-- ARGV[1]  owner token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  '1' from Lease.Extend: may shorten; else (a renewal) only later
--
-- Returns 1 renewed, 0 not held (expired or released): never re-created;
-- or WRONGTYPE when another program wrote over the tokens, which are left
-- as they are (their expiry too), or when they are gone (foreign_tokens):
-- the holders' set then expires with its last permit.
--
-- Safe to send twice, and to arrive late: a copy finds the hold this
-- owner's or not (and does nothing); an owner token is never reused, so a
-- copy arriving after the release finds nothing of its owner's. A renewal
-- only ever moves the expiry later: a late one, asking for the TTL before
-- an Extend to a longer one, leaves the longer in place. Only an explicit
-- Extend (ARGV[3] '1') sets a shorter one; a late copy of that is the
-- client's to allow for (Lease.inDoubt).

local now = server_now()
if not live_score(HOLDERS, ARGV[1], now) then
  return 0
end
local wrong = foreign_tokens()
if wrong then
  return wrong
end
extend_score(HOLDERS, ARGV[1], now + tonumber(ARGV[2]), may_shorten(ARGV[3]))
expire_with_last(now)
return 1
