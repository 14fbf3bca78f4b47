-- Release a Mutex held by this owner and wake the next waiter.
--
-- KEYS[1]  lock key
-- KEYS[2]  the lock's wake-up channel (declared as a key so a cluster routes
--          it to the lock's slot)
-- KEYS[3]  waiters: sorted set of waiter ids by registration expiry
-- ARGV[1]  owner token
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Returns 1 released, 0 not held by this owner (expired, or someone else's).
--
-- Safe to send twice: the second finds the key gone or another owner's, and
-- touches nothing.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  wake_next(KEYS[3], KEYS[2], ARGV[2])
  return 1
end
return 0
