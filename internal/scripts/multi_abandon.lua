-- Give up on acquiring a MultiLock group: after an attempt whose outcome the
-- client does not know, or when a waiter stops waiting.
--
-- KEYS     MultiPartLayout (layout.go) key by key, then TOMBSTONE: see
--          multi_lib.lua
-- ARGV     in the order of AbandonArgs (args.go), by these names:
-- OWNER    the call's owner token when an attempt is in doubt; '' when none is
-- PUBLISH  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- WAITER   waiter id to unregister; '' when not registered
-- ALSO     the lock (1-based) the waiter registered on
--
-- Returns 1 the attempt had taken the locks and they are released now, else 0.
--
-- The tombstone (the call's, shared by all its attempts) makes a copy of any
-- attempt of the call still on its way refuse itself, taking no lock and
-- registering nothing. It is written whatever this script finds, also when
-- it releases the locks (a copy of an applied attempt may be resent after a
-- read timeout), and lasts VOID_TTL, not the TTL: a copy is sent before its
-- call gives up, and one later than that leaves what an abandon that never
-- arrived would, locks expiring with their TTL.
--
-- Safe to send twice: a second copy finds nothing of the call's left to
-- release or withdraw, and writes the tombstone again; at most it wakes (or
-- hands a free lock to) the next live waiter, as a release would.

local released = 0
if OWNER ~= '' then
  for i = 1, N do
    local lock, fence, waiters, channel = part(i)
    if redis.call('GET', lock) == OWNER then
      hand_next(lock, fence, waiters, channel, PUBLISH)
      released = 1
    end
  end
end
redis.call('SET', TOMBSTONE, '1', 'PX', VOID_TTL)
if WAITER ~= '' then
  local lock, fence, waiters, channel = part(tonumber(ALSO))
  local withdrawn = dlocks_beside(waiters, 'zset') and redis.call('ZREM', waiters, WAITER) == 1
  if not withdrawn and redis.call('EXISTS', lock) == 0 then
    hand_next(lock, fence, waiters, channel, PUBLISH)
  end
end
return released
