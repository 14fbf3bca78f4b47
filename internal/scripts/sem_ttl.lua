-- How long a Semaphore permit has left.
--
-- KEYS     HOLDERS, TOKENS, PERMITS: SemLayout (sem.go) up to WAITERS,
--          as in sem_lib.lua (HOLDERS alone read)
-- ARGV     in the order of OwnerArgs (args.go), by these names:
-- OWNER    owner token
--
-- Returns the milliseconds left, or -3 when this owner holds no permit.
--
-- Reads only: a copy, however late, changes nothing.

local now = server_now()
local score = live_score(HOLDERS, OWNER, now)
if not score then
  return -3
end
return score - now
