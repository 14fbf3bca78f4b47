-- Release a MultiLock group and hand each lock to its next waiter.
--
-- KEYS     four per lock: see multi_lib.lua
-- ARGV[1]  owner token
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Returns 1 when every lock was held by this owner and is released; 0 when
-- some were not (expired, or taken): those still held are released all the
-- same.

local released = 0
for i = 1, N do
  local lock, fence, waiters, channel = part(i)
  if redis.call('GET', lock) == ARGV[1] then
    hand_next(lock, fence, waiters, channel, ARGV[2])
    released = released + 1
  end
end
if released == N then
  return 1
end
return 0
