-- How long a Semaphore permit has left.
--
-- KEYS     HOLDERS, TOKENS, PERMITS: SemLayout (layout.go) up to WAITERS,
--          as in sem_lib.lua (HOLDERS alone read)
-- ARGV[1]  owner token
--
-- Returns the milliseconds left, or -3 when this owner holds no permit.
--
-- Reads only: a copy, however late, changes nothing.

local now = server_now()
local score = live_score(HOLDERS, ARGV[1], now)
if not score then
  return -3
end
return score - now
