-- Remove a lock whatever holds it: the operator's escape hatch. Works on
-- every type: KEYS[1] is a Mutex's (FairMutex's, MultiLock's) lock key, a
-- Semaphore's holders, an RWMutex's or ReentrantMutex's state.
--
-- KEYS[1..7] as in rw_lib.lua
-- ARGV[1]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Returns 1 something was held and is gone, 0 nothing was held.
--
-- The fencing counter stays, so tokens keep increasing past the removed
-- holds. Their holders find out at their next renewal. Every waiter is woken
-- (this is no hot path): the next to try takes the lock. Most types' waiters
-- listen on their client's own channel, each of which is told too (see
-- wake_all in common.lua).

if redis.call('DEL', STATE, HOLDS, RPASS) == 0 then
  return 0
end
wake_all(WWAIT, WCHAN, ARGV[1])
redis.call(ARGV[1], RCHAN, '*')
return 1
