-- Extend a Mutex held by this owner to a new TTL (renewal and Lease.Extend).
--
-- KEYS[1]  lock key
-- ARGV[1]  owner token
-- ARGV[2]  new TTL in milliseconds
--
-- Returns 1 extended, 0 not held by this owner.
--
-- Never re-creates a missing key: a lock that expired or was deleted is lost,
-- and someone else may already have been told it was free.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
