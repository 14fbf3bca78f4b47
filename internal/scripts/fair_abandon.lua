-- Give up on acquiring a FairMutex: after an attempt whose outcome the
-- client does not know, or when a waiter stops waiting.
--
-- KEYS     FairLayout (layout.go), then TOMBSTONE: as in fair_lib.lua
-- ARGV     in the order of AbandonArgs (args.go), by these names:
-- OWNER    owner token of the Lock call
-- PUBLISH  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- WAITER   waiter id it queued under; '' when it did not queue
--
-- Returns 1 the lock was this caller's (taken, or handed over to it while it
-- gave up) and is passed on now, else 0.
--
-- The tombstone makes a copy of any attempt of the call still on its way
-- refuse itself should it arrive: it would otherwise take the lock, or a
-- place in the queue, for a caller that has gone. It is written whatever
-- this script finds, also when it passes on a hold of the call: a copy of
-- an attempt already applied may be resent (go-redis does so after a read
-- timeout). It lasts VOID_TTL, not the TTL (which may be years): a copy is
-- sent before its call gives up, and one later than that bound leaves what
-- an abandon that never arrived would, a hold that expires with its TTL.
--
-- Safe to send twice: a second copy finds nothing of the call's left to
-- release or withdraw, and writes the tombstone again; at most it wakes (or
-- hands a free lock to) the next live waiter, as a release would.

if WAITER ~= '' then
  local entry = OWNER .. WAITER
  for _, set in ipairs({QUEUE, REG}) do
    if dlocks_beside(set, 'zset') then
      redis.call('ZREM', set, entry)
    end
  end
end
redis.call('SET', TOMBSTONE, '1', 'PX', VOID_TTL)
if redis.call('GET', LOCK) == OWNER then
  redis.call('DEL', LOCK)
  hand_over(PUBLISH)
  return 1
end
return 0
