-- Give up on acquiring a Mutex: after an attempt whose outcome the client
-- does not know (it timed out, was cancelled, or failed on the network), or
-- when a waiter stops waiting.
--
-- KEYS[1]  lock key
-- KEYS[2]  the lock's wake-up channel
-- KEYS[3]  the last attempt's tombstone
-- KEYS[4]  waiters: sorted set of registrations by expiry (hand_next.lua)
-- KEYS[5]  fencing counter, for a hand-over's token
-- ARGV[1]  owner token of the Lock call; '' when no attempt is in doubt
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- ARGV[3]  tombstone lifetime in milliseconds (the attempt's TTL); 0 when
--          no attempt is in doubt (a waiter leaving), so none is written
-- ARGV[4]  registration to withdraw; '' when not registered
-- ARGV[5]  the one before it, should the last attempt not have replaced it;
--          '' when none
--
-- Returns 1 the call held the lock (taken by an attempt, or handed over by
-- a release) and it is released now, else 0.
--
-- An attempt that had not been applied may still be on its way: the
-- tombstone makes it refuse itself should it arrive. A lock handed to a
-- waiter that leaves is passed on, as is a wake-up a release sent to one
-- (a waiter registered by a MultiLock): when no registration of this call
-- is left and the lock is free, the next waiter gets it.

local released = 0
if ARGV[1] ~= '' then
  if redis.call('GET', KEYS[1]) == ARGV[1] then
    released = 1
  elseif tonumber(ARGV[3]) > 0 then
    redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
  end
end
local picked = false
if ARGV[4] ~= '' then
  local withdrawn
  if ARGV[5] ~= '' then
    withdrawn = redis.pcall('ZREM', KEYS[4], ARGV[4], ARGV[5])
  else
    withdrawn = redis.pcall('ZREM', KEYS[4], ARGV[4])
  end
  picked = withdrawn == 0 -- a foreign key there: not ours to fix
end
if released == 1 or (picked and redis.call('EXISTS', KEYS[1]) == 0) then
  hand_next(KEYS[1], KEYS[5], KEYS[4], KEYS[2], ARGV[2])
end
return released
