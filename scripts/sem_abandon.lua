-- Give up on acquiring a Semaphore permit: after an attempt whose outcome
-- the client does not know, or when a waiter stops waiting.
--
-- KEYS[1..7] as in sem_lib.lua
-- ARGV[1]  owner token of the last attempt; '' when no attempt is in doubt
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- ARGV[3]  tombstone lifetime in milliseconds (the attempt's TTL)
-- ARGV[4]  waiter id to unregister; '' when not registered
--
-- Returns 1 the attempt had taken a permit and it is given back now, else 0.
--
-- The tombstone makes an attempt still on its way refuse itself. A waiter
-- that leaves after a release picked it passes the wake-up on while a
-- permit is free.

local released = 0
if ARGV[1] ~= '' then
  if redis.call('ZREM', HOLDERS, ARGV[1]) == 1 then
    redis.call('HDEL', TOKENS, ARGV[1])
    released = 1
  else
    redis.call('SET', KEYS[7], '1', 'PX', ARGV[3])
  end
end
local picked = false
if ARGV[4] ~= '' then
  picked = redis.pcall('ZREM', WAITERS, ARGV[4]) == 0
end
if released == 1 or (picked and permit_free()) then
  wake_next(WAITERS, CHANNEL, ARGV[2])
end
return released
