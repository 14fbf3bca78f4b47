-- Change the number of permits of a Semaphore, deliberately.
--
-- KEYS     SemLayout (sem.go), as in sem_lib.lua (FENCE only looked at)
-- ARGV     in the order of SetPermitsArgs (sem.go), by these names:
-- COUNT    the new number of permits
-- PUBLISH  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- HOLD_TTL the handle's TTL in milliseconds: a number set while no permit
--          is held lasts FENCE_RETENTION_TTLS of it; else it lasts as long
--          as the holders (expire_with_last in sem_lib.lua)
--
-- Returns the number it had before (0: none yet).
--
-- Permits held above a lower number are not taken back: they end as their
-- holders release them, and no new one is granted until the holders are
-- below it. Every waiter is woken, for a higher number may let them in.
-- Fails with WRONGTYPE, changing nothing, when a key of the semaphore holds
-- what dlock did not write (see foreign.lua).
--
-- Safe to send twice: the second sets the same number. A copy arriving
-- after a later SetPermits would set the older number back: SetPermits is
-- an operator's change, not made concurrently.

local wrong = foreign_key({FENCE}, {WAITERS}, {}) or foreign_semaphore(HOLDERS, TOKENS) or foreign_counter(PERMITS)
if wrong then
  return wrong
end
local before = tonumber(redis.call('GET', PERMITS)) or 0
local held = redis.call('PTTL', HOLDERS)
if held > 0 then
  redis.call('SET', PERMITS, COUNT, 'PX', held)
else
  redis.call('SET', PERMITS, COUNT, 'PX', FENCE_RETENTION_TTLS * tonumber(HOLD_TTL))
end
wake_all(WAITERS, CHANNEL, PUBLISH)
return before
