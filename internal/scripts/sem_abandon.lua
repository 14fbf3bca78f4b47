-- Give up on acquiring a Semaphore permit: after an attempt whose outcome
-- the client does not know, or when a waiter stops waiting.
--
-- KEYS     SemLayout (sem.go), then TOMBSTONE: as in sem_lib.lua
-- ARGV     in the order of AbandonArgs (args.go), by these names:
-- OWNER    the call's owner token when an attempt is in doubt; '' when none is
-- PUBLISH  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- WAITER   waiter id to unregister; '' when not registered
--
-- Returns 1 the attempt had taken a permit and it is given back now, else 0.
--
-- The tombstone (TOMBSTONE, the call's, shared by all its attempts) makes a
-- copy of any attempt of the call still on its way refuse itself, taking no
-- permit and registering nothing. It is written whatever this script finds,
-- also when it gives a permit back (a copy of an applied attempt may be
-- resent after a read timeout), and lasts VOID_TTL, not the TTL: a copy is
-- sent before its call gives up, and one later than that leaves what an
-- abandon that never arrived would, a permit expiring with its TTL. A waiter
-- that leaves after a release picked it passes the wake-up on while a
-- permit is free.
--
-- Safe to send twice: a second copy finds nothing of the call's left to
-- release or withdraw, and writes the tombstone again; at most it wakes (or
-- hands a free lock to) the next live waiter, as a release would.

local released = 0
redis.call('SET', TOMBSTONE, '1', 'PX', VOID_TTL)
if OWNER ~= '' and redis.call('ZREM', HOLDERS, OWNER) == 1 then
  redis.call('HDEL', TOKENS, OWNER, 'i' .. OWNER)
  released = 1
end
local picked = false
if WAITER ~= '' then
  picked = not (dlocks_beside(WAITERS, 'zset') and redis.call('ZREM', WAITERS, WAITER) == 1)
end
if released == 1 or (picked and permit_free()) then
  wake_next(WAITERS, CHANNEL, PUBLISH)
end
return released
