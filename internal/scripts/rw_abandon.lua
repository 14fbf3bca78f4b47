-- Give up on acquiring an RWMutex or ReentrantMutex: after an attempt whose
-- outcome the client does not know (it timed out, was cancelled, or failed on
-- the network), or when a waiter stops waiting.
--
-- KEYS     RWLayout (layout.go), then TOMBSTONE: as in rw_lib.lua
-- ARGV     in the order of AbandonArgs (args.go), by these names:
-- OWNER    member of the attempt in doubt; '' when none is
-- PUBLISH  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- WAITER   waiter id to unregister; '' when not registered
--
-- Returns 1 the attempt had been granted and is released now, else 0. The
-- call's registration goes in either case.
--
-- A copy of any attempt of the call may still be on its way, applied before
-- or not (go-redis resends after a read timeout): the tombstone (TOMBSTONE,
-- the call's, shared by all its attempts) makes it refuse itself, taking
-- no hold and registering nothing. It is written whatever this script finds,
-- also when it releases a hold, and lasts VOID_TTL, not the TTL: a copy is
-- sent before its call gives up, and one later than that leaves what an
-- abandon that never arrived would, a hold expiring with its TTL. A waiter that leaves may have been woken
-- already (writers stay registered until they get their turn; passed readers
-- hold writers back): when nothing is held any more, whoever can go is woken.
--
-- Safe to send twice: a second copy finds nothing of the call's left to
-- release or withdraw, and writes the tombstone again; at most it wakes (or
-- hands a free lock to) the next live waiter, as a release would.

local now = server_now()
redis.call('SET', TOMBSTONE, '1', 'PX', VOID_TTL)
-- The registration goes first, also when a hold is released: a late copy
-- of an earlier attempt may have taken the hold while the call waited.
local left = false
if WAITER ~= '' then
  for _, set in ipairs({WWAIT, RWAIT, RPASS}) do
    if dlocks_beside(set, 'zset') and redis.call('ZREM', set, WAITER) == 1 then
      left = true
    end
  end
end
if OWNER ~= '' and live_score(HOLDS, OWNER, now) then
  return release_hold(OWNER, PUBLISH, now) or 1
end
if left then
  wake(PUBLISH, now, false)
end
return 0
