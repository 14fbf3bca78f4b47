-- Renew a Semaphore permit: only while this owner holds it.
--
-- KEYS[1..2] as in sem_lib.lua
-- ARGV[1]  owner token
-- ARGV[2]  TTL in milliseconds
--
-- Returns 1 renewed, 0 not held (expired or released): never re-created.

local now = server_now()
if not live_score(HOLDERS, ARGV[1], now) then
  return 0
end
redis.call('ZADD', HOLDERS, 'XX', now + tonumber(ARGV[2]), ARGV[1])
expire_with_last(now)
return 1
