-- Extend a Mutex held by this owner to a new TTL (renewal and Lease.Extend).
--
-- KEYS[1]  lock key
-- ARGV[1]  owner token
-- ARGV[2]  new TTL in milliseconds
-- ARGV[3]  '1' from Lease.Extend: may shorten; else (a renewal) only later
--
-- Returns 1 extended, 0 not held by this owner.
--
-- Never re-creates a missing key: a lock that expired or was deleted is lost,
-- and someone else may already have been told it was free.
--
-- Safe to send twice, and to arrive late: a copy finds the hold this
-- owner's or not (and does nothing); an owner token is never reused, so a
-- copy arriving after the release finds nothing of its owner's. A renewal
-- only ever moves the expiry later: a late one, asking for the TTL before
-- an Extend to a longer one, leaves the longer in place. Only an explicit
-- Extend (ARGV[3] '1') sets a shorter one; a late copy of that is the
-- client's to allow for (Lease.inDoubt).

if redis.call('GET', KEYS[1]) == ARGV[1] then
  extend_key(KEYS[1], ARGV[2], may_shorten(ARGV[3]))
  return 1
end
return 0
