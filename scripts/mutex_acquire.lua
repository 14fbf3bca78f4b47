-- Acquire a Mutex: take the lock if it is free and mint a fencing token.
--
-- KEYS[1]  lock key: a string holding the owner token, with a TTL
-- KEYS[2]  fencing counter: an integer without TTL, in the same slot
-- KEYS[3]  this attempt's tombstone, written by mutex_abandon.lua
-- KEYS[4]  waiters: sorted set of waiter ids by registration expiry
-- ARGV[1]  owner token of this attempt (random, unique per acquisition)
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  waiter id to register when refused; '' for an attempt that will
--          not wait for a wake-up (TryLock, a first try, no subscription)
-- ARGV[4]  how long a registration lasts, in milliseconds
--
-- Returns {1, fence}  acquired; fence is the new fencing token
--         {0, pttl}   held by another owner; pttl is the milliseconds until it
--                     expires (-1: the key has no TTL)
--         {-1, 0}     this attempt was abandoned by its client: do nothing
-- Fails with WRONGTYPE, changing nothing, when a key of the lock holds a value
-- of another type (written by something other than dlock).
--
-- A refused waiter is registered in the same step as its refusal, after it
-- subscribed: the release that follows pops it (or another live waiter) and
-- publishes to it, so no wake-up is lost and one release wakes one waiter.
--
-- Safe to send twice: the owner token is unique to this attempt, so a resend
-- that finds it already in place reports the same acquisition and mints nothing.
-- Safe to arrive late: a client that gave up on this attempt left a tombstone,
-- so an attempt delayed past its own cleanup cannot leave an orphaned hold.
-- The tombstone is looked at only once the lock is taken, which spares the
-- refused attempts of contending waiters a command; scripts are atomic, so
-- nobody sees the hold that is taken back.

if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('DEL', KEYS[1])
    return {-1, 0}
  end
  -- From here an error must not leave the hold behind: pcall, undo, report.
  if ARGV[3] ~= '' then
    local removed = redis.pcall('ZREM', KEYS[4], ARGV[3])
    if type(removed) == 'table' and removed.err then
      redis.call('DEL', KEYS[1])
      return removed
    end
  end
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' and fence.err then
    redis.call('DEL', KEYS[1])
    return fence
  end
  return {1, fence}
end
-- SET NX succeeds on nothing but an absent key, so a key of another type lands
-- here too; GET is what raises WRONGTYPE for it.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end
if ARGV[3] ~= '' then
  register_waiter(KEYS[4], ARGV[3], ARGV[4])
end
return {0, redis.call('PTTL', KEYS[1])}
