-- Give back a permit of a Semaphore and wake the next waiter.
--
-- KEYS[1..5] as in sem_lib.lua
-- ARGV[1]  owner token
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Returns 1 released, 0 not held by this owner (expired, or never taken).
--
-- Safe to send twice: the second finds no permit of this owner.

local now = server_now()
local held = live_score(HOLDERS, ARGV[1], now)
if redis.call('ZREM', HOLDERS, ARGV[1]) == 0 then
  return 0
end
redis.call('HDEL', TOKENS, ARGV[1])
wake_next(WAITERS, CHANNEL, ARGV[2])
if held then
  return 1
end
return 0
