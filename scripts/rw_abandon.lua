-- Give up on acquiring an RWMutex or ReentrantMutex: after an attempt whose
-- outcome the client does not know (it timed out, was cancelled, or failed on
-- the network), or when a waiter stops waiting.
--
-- KEYS[1..9] as in rw_lib.lua
-- ARGV[1]  member of the attempt in doubt; '' when none is
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- ARGV[3]  tombstone lifetime in milliseconds (the attempt's TTL)
-- ARGV[4]  waiter id to unregister; '' when not registered
--
-- Returns 1 the attempt had been granted and is released now, else 0.
--
-- An attempt not applied yet may still be on its way: the tombstone makes it
-- refuse itself should it arrive. A waiter that leaves may have been woken
-- already (writers stay registered until they get their turn; passed readers
-- hold writers back): when nothing is held any more, whoever can go is woken.

local now = server_now()
if ARGV[1] ~= '' then
  purge(now)
  if live_score(HOLDS, ARGV[1], now) then
    release_hold(ARGV[1], ARGV[2], now)
    return 1
  end
  redis.call('SET', KEYS[9], '1', 'PX', ARGV[3])
end
if ARGV[4] ~= '' then
  local left = false
  for _, set in ipairs({WWAIT, RWAIT, RPASS}) do
    if redis.pcall('ZREM', set, ARGV[4]) == 1 then -- a foreign key there: not ours to fix
      left = true
    end
  end
  if left then
    wake(ARGV[2], now, false)
  end
end
return 0
