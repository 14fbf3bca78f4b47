-- Extend one hold of an RWMutex or ReentrantMutex to a new TTL (renewal and
-- Lease.Extend). The owner's other holds keep their own expiry.
--
-- KEYS[1..2] as in rw_lib.lua
-- ARGV[1]  member of the hold
-- ARGV[2]  new TTL in milliseconds
--
-- Returns 1 extended, 0 not held.
--
-- Never brings back a hold that expired or was released: someone else may
-- already have been told the lock was free.

local now = server_now()
if not live_score(HOLDS, ARGV[1], now) then
  return 0
end
redis.call('ZADD', HOLDS, 'XX', now + tonumber(ARGV[2]), ARGV[1])
expire_with_last()
return 1
