-- Remove a lock whatever holds it: the operator's escape hatch. Works on a
-- Mutex and on an RWMutex or ReentrantMutex.
--
-- KEYS[1]  lock key (a Mutex's string, or a read-write lock's state)
-- KEYS[2]  a read-write lock's holds
-- KEYS[3]  a read-write lock's passed readers
-- KEYS[4]  the (writers') wake-up channel
-- KEYS[5]  the readers' wake-up channel
-- ARGV[1]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Returns 1 something was held and is gone, 0 nothing was held.
--
-- The fencing counter stays, so tokens keep increasing past the removed
-- holds. Their holders find out at their next renewal. Every waiter is woken
-- (this is no hot path): the next to try takes the lock.

local removed = redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
if removed == 0 then
  return 0
end
redis.call(ARGV[1], KEYS[4], '*')
redis.call(ARGV[1], KEYS[5], '*')
return 1
