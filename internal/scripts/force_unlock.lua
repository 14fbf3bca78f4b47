-- Remove a lock whatever holds it: the operator's escape hatch. Works on
-- every type: STATE is a Mutex's (FairMutex's, MultiLock's) lock key, a
-- Semaphore's holders, an RWMutex's or ReentrantMutex's state.
--
-- KEYS     AnyLockLayout (layout.go), named in Lua as describe.lua says;
--          here FORCED, the mark of a forced removal, is written: a string,
--          the owner token of the Mutex (FairMutex, Election) hold removed,
--          for as long as that hold had left, so that its lease's renewal
--          tells a removal by force from an expiry (mutex_extend.lua).
--          Holds of other types carry no single owner, and get none.
--          The keys holds live in (ANY.held) and holder info
--          (ANY.holders) are removed.
-- ARGV     in the order of PublishArgs (args.go), by these names:
-- PUBLISH  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Returns 1 something was held and is gone, 0 nothing was held.
-- Fails with WRONGTYPE, removing nothing, when a key of the name holds what
-- dlock did not write (see foreign.lua): that is not a lock to remove.
--
-- The fencing counter stays, so tokens keep increasing past the removed
-- holds. Their holders find out at their next renewal. Every waiter is woken
-- (this is no hot path): the next to try takes the lock. Most types' waiters
-- listen on their client's own channel, each of which is told too (see
-- wake_all in common.lua).
--
-- A copy arriving late removes whatever holds the lock then: it is the
-- operator's hatch, sent once by hand, and go-redis resends it only within
-- the operator's call.

local wrong = foreign_lock(STATE, TOKENS, ANY)
if wrong then
  return wrong
end
if redis.call('TYPE', STATE).ok == 'string' then -- an owner token (foreign_lock)
  local left = redis.call('PTTL', STATE)
  if left > 0 then
    redis.call('SET', FORCED, redis.call('GET', STATE), 'PX', left)
  end
end
redis.call('DEL', unpack(ANY.holders))
if redis.call('DEL', unpack(ANY.held)) == 0 then
  return 0
end
wake_all(WWAIT, WCHAN, PUBLISH)
redis.call(PUBLISH, RCHAN, '*')
return 1
