-- Release a FairMutex held by this owner and hand it to the first waiter.
--
-- KEYS[1..5] as in fair_lib.lua
-- ARGV[1]  owner token
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Returns 1 released, 0 not held by this owner (expired, or someone else's).
--
-- The lock goes straight to the head of the queue, inside this script:
-- neither the releaser nor a newcomer can take it in between.

if redis.call('GET', LOCK) ~= ARGV[1] then
  return 0
end
redis.call('DEL', LOCK)
hand_over(ARGV[2])
return 1
