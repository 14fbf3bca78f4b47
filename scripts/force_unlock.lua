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
-- (this is no hot path): the next to try takes the lock. A Mutex's and a
-- FairMutex's waiters listen on their client's own channel (see
-- hand_next.lua and fair_lib.lua), each of which is told too.

if redis.call('DEL', STATE, HOLDS, RPASS) == 0 then
  return 0
end
redis.call(ARGV[1], WCHAN, '*')
redis.call(ARGV[1], RCHAN, '*')
local waiting = redis.pcall('ZRANGE', WWAIT, 0, -1)
if not waiting.err then
  local told = {}
  for _, entry in ipairs(waiting) do
    local client = string.match(entry, '^([^/:]+)/[^:]+:%d') -- a Mutex waiter's
    if client == nil and #entry > 32 then -- a FairMutex waiter's, after its owner token
      client = string.match(entry:sub(33), '^([^/:]+)/[^:]+$')
    end
    if client ~= nil and not told[client] then
      told[client] = true
      redis.call(ARGV[1], WCHAN .. ':' .. client, '*')
    end
  end
end
return 1
