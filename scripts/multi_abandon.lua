-- Give up on acquiring a MultiLock group: after an attempt whose outcome the
-- client does not know, or when a waiter stops waiting.
--
-- KEYS     four per lock, then the tombstone: see multi_lib.lua
-- ARGV[1]  owner token of the last attempt; '' when no attempt is in doubt
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- ARGV[3]  tombstone lifetime in milliseconds (the attempt's TTL)
-- ARGV[4]  waiter id to unregister; '' when not registered
-- ARGV[5]  the lock (1-based) the waiter registered on
--
-- Returns 1 the attempt had taken the locks and they are released now, else 0.

local released = 0
if ARGV[1] ~= '' then
  for i = 1, N do
    local lock, fence, waiters, channel = part(i)
    if redis.call('GET', lock) == ARGV[1] then
      hand_next(lock, fence, waiters, channel, ARGV[2])
      released = 1
    end
  end
  if released == 0 then
    redis.call('SET', KEYS[4 * N + 1], '1', 'PX', ARGV[3])
  end
end
if ARGV[4] ~= '' then
  local lock, fence, waiters, channel = part(tonumber(ARGV[5]))
  if redis.pcall('ZREM', waiters, ARGV[4]) == 0 and redis.call('EXISTS', lock) == 0 then
    hand_next(lock, fence, waiters, channel, ARGV[2])
  end
end
return released
