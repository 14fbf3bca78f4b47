-- Extend a Mutex held by this owner to a new TTL (renewal and Lease.Extend).
--
-- KEYS     in the order of MutexExtendLayout (layout.go), by these names:
-- LOCK     lock key
-- FORCED   the lock's mark of a forced removal (force_unlock.lua), holding
--          the owner token of the hold it removed; absent for a Redlock's
-- HOLDER   the lock's holder info (see set_holder_info in common.lua),
--          extended with the hold when it is this owner's; absent for an
--          Election's and a Redlock's
-- ARGV     in the order of ExtendArgs (args.go), by these names:
-- OWNER    owner token
-- HOLD_TTL new TTL in milliseconds
-- SHORTEN  '1' from Lease.Extend: may shorten; else (a renewal) only later
-- WITH_INFO '0' when the hold was taken without holder info: none to extend
--
-- Returns 1 extended; else not held by this owner, and why (LossReason in
-- Go): 0 the key is gone (expired or deleted), -1 another owner holds it,
-- -2 it was removed by force from this owner.
--
-- Never re-creates a missing key: a lock that expired or was deleted is lost,
-- and someone else may already have been told it was free.
--
-- Safe to send twice, and to arrive late: a copy finds the hold this
-- owner's or not (and does nothing); an owner token is never reused, so a
-- copy arriving after the release finds nothing of its owner's. A renewal
-- only ever moves the expiry later: a late one, asking for the TTL before
-- an Extend to a longer one, leaves the longer in place. Only an explicit
-- Extend (SHORTEN '1') sets a shorter one; a late copy of that is the
-- client's to allow for (Lease.inDoubt).

local holder = redis.call('GET', LOCK)
if holder == OWNER then
  extend_key(LOCK, HOLD_TTL, may_shorten(SHORTEN))
  if WITH_INFO ~= '0' and holder_info_of(HOLDER, OWNER) then
    extend_key(HOLDER, HOLD_TTL, may_shorten(SHORTEN))
  end
  return 1
end
if FORCED and call_or_wrongtype('GET', FORCED) == OWNER then -- first: a new holder may have come since
  return -2
end
if holder then
  return -1
end
return 0
