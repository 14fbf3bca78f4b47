-- Renew a Semaphore permit: only while this owner holds it.
--
-- KEYS     HOLDERS, TOKENS, PERMITS: SemLayout (sem.go) up to WAITERS, as
--          in sem_lib.lua
-- ARGV     in the order of ExtendArgs (args.go), by these names:
-- OWNER    owner token
-- HOLD_TTL TTL in milliseconds
-- SHORTEN  '1' from Lease.Extend: may shorten; else (a renewal) only later
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
-- Extend (SHORTEN '1') sets a shorter one; a late copy of that is the
-- client's to allow for (Lease.inDoubt).

local now = server_now()
if not live_score(HOLDERS, OWNER, now) then
  return 0
end
local wrong = foreign_tokens()
if wrong then
  return wrong
end
extend_score(HOLDERS, OWNER, now + tonumber(HOLD_TTL), may_shorten(SHORTEN))
expire_with_last(now)
return 1
