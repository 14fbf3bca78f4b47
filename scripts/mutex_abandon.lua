-- Give up on acquiring a Mutex: after an attempt whose outcome the client
-- does not know (it timed out, was cancelled, or failed on the network), or
-- when a waiter stops waiting.
--
-- KEYS[1]  lock key
-- KEYS[2]  the lock's wake-up channel
-- KEYS[3]  the last attempt's tombstone
-- KEYS[4]  waiters: sorted set of waiter ids by registration expiry
-- ARGV[1]  owner token of the last attempt; '' when no attempt is in doubt
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- ARGV[3]  tombstone lifetime in milliseconds (the attempt's TTL)
-- ARGV[4]  waiter id to unregister; '' when not registered
--
-- Returns 1 the attempt had taken the lock and it is released now, else 0.
--
-- An attempt that had not been applied may still be on its way: the
-- tombstone makes it refuse itself should it arrive. A waiter that leaves
-- after a release already picked it would swallow that wake-up: when it is
-- no longer registered and the lock is free, the next waiter is woken.

local released = 0
if ARGV[1] ~= '' then
  if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    released = 1
  else
    redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
  end
end
local picked = false
if ARGV[4] ~= '' then
  picked = redis.pcall('ZREM', KEYS[4], ARGV[4]) == 0 -- a foreign key there: not ours to fix
end
if released == 1 or (picked and redis.call('EXISTS', KEYS[1]) == 0) then
  wake_next(KEYS[4], KEYS[2], ARGV[2])
end
return released
