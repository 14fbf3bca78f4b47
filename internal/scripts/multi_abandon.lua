-- Give up on acquiring a MultiLock group: after an attempt whose outcome the
-- client does not know, or when a waiter stops waiting.
--
-- KEYS     MultiPartLayout (layout.go) per lock, then TOMBSTONE: see
--          multi_lib.lua
-- ARGV[1]  the call's owner token when an attempt is in doubt; '' when none is
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- ARGV[3]  tombstone lifetime in milliseconds: how long a copy of an
--          attempt may still arrive (see tombstoneLife in dlock.go)
-- ARGV[4]  waiter id to unregister; '' when not registered
-- ARGV[5]  the lock (1-based) the waiter registered on
--
-- Returns 1 the attempt had taken the locks and they are released now, else 0.
--
-- The tombstone (the call's, shared by all its attempts) makes a copy of any
-- attempt of the call still on its way refuse itself, taking no lock and
-- registering nothing. It is written whatever this script finds, also when
-- it releases the locks (a copy of an applied attempt may be resent after a
-- read timeout), and lasts ARGV[3], not the TTL: a copy is sent before its
-- call gives up, and one later than that leaves what an abandon that never
-- arrived would, locks expiring with their TTL.
--
-- Safe to send twice: a second copy finds nothing of the call's left to
-- release or withdraw, and writes the tombstone again; at most it wakes (or
-- hands a free lock to) the next live waiter, as a release would.

local released = 0
if ARGV[1] ~= '' then
  for i = 1, N do
    local p = part(i)
    if redis.call('GET', p.LOCK) == ARGV[1] then
      hand_next(p.LOCK, p.FENCE, p.WAITERS, p.CHANNEL, ARGV[2])
      released = 1
    end
  end
end
if tonumber(ARGV[3]) > 0 then
  redis.call('SET', TOMBSTONE, '1', 'PX', ARGV[3])
end
if ARGV[4] ~= '' then
  local p = part(tonumber(ARGV[5]))
  local withdrawn = dlocks_beside(p.WAITERS, 'zset') and redis.call('ZREM', p.WAITERS, ARGV[4]) == 1
  if not withdrawn and redis.call('EXISTS', p.LOCK) == 0 then
    hand_next(p.LOCK, p.FENCE, p.WAITERS, p.CHANNEL, ARGV[2])
  end
end
return released
