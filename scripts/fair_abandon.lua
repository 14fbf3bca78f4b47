-- Give up on acquiring a FairMutex: after an attempt whose outcome the
-- client does not know, or when a waiter stops waiting.
--
-- KEYS[1..6] as in fair_lib.lua
-- ARGV[1]  owner token of the Lock call
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- ARGV[3]  tombstone lifetime in milliseconds (the attempt's TTL)
-- ARGV[4]  waiter id it queued under; '' when it did not queue
--
-- Returns 1 the lock was this caller's (taken, or handed over to it while it
-- gave up) and is passed on now, else 0.
--
-- The tombstone makes an attempt still on its way refuse itself should it
-- arrive: it would otherwise take the lock, or a place in the queue, for a
-- caller that has gone.

if ARGV[4] ~= '' then
  local entry = ARGV[1] .. ARGV[4]
  redis.call('ZREM', QUEUE, entry)
  redis.call('ZREM', REG, entry)
end
if redis.call('GET', LOCK) == ARGV[1] then
  redis.call('DEL', LOCK)
  hand_over(ARGV[2])
  return 1
end
redis.call('SET', KEYS[6], '1', 'PX', ARGV[3])
return 0
