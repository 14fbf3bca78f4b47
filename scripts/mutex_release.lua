-- Release a Mutex held by this owner and wake one waiter.
--
-- KEYS[1]  lock key
-- KEYS[2]  the lock's wake-up channel (declared as a key so a cluster routes
--          it to the lock's slot)
-- ARGV[1]  owner token
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Returns 1 released, 0 not held by this owner (expired, or someone else's).
--
-- Safe to send twice: the second finds the key gone or another owner's, and
-- touches nothing.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[2], KEYS[2], '1')
  return 1
end
return 0
