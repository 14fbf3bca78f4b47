-- Change the number of permits of a Semaphore, deliberately.
--
-- KEYS[1..5] as in sem_lib.lua
-- ARGV[1]  the new number of permits
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Returns the number it had before (0: none yet).
--
-- Permits held above a lower number are not taken back: they end as their
-- holders release them, and no new one is granted until the holders are
-- below it. Every waiter is woken, for a higher number may let them in.

local before = tonumber(redis.call('GET', PERMITS)) or 0
redis.call('SET', PERMITS, ARGV[1])
wake_all(WAITERS, CHANNEL, ARGV[2])
return before
