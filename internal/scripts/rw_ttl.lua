-- Report how long one hold of an RWMutex or ReentrantMutex has left.
--
-- KEYS     STATE, HOLDS: RWLayout (layout.go) up to WWAIT, as in rw_lib.lua
-- ARGV     in the order of OwnerArgs (args.go), by these names:
-- OWNER    member of the hold
--
-- Returns the milliseconds left, or -3 when not held.
--
-- Reads only: a copy, however late, changes nothing.

local now = server_now()
local score = live_score(HOLDS, OWNER, now)
if score == nil then
  return -3
end
return score - now
