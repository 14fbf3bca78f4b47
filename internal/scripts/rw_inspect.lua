-- Describe an RWMutex or ReentrantMutex as it is now, without changing it.
--
-- KEYS     RWLayout (layout.go), as in rw_lib.lua
-- ARGV     in the order of OwnerArgs (args.go), by these names:
-- OWNER    owner id of the asking handle
--
-- Returns rw_state(OWNER) (rw_lib.lua). Fails with WRONGTYPE when a key
-- holds what dlock did not write (see foreign.lua): that is no holder.
--
-- Reads only: a copy, however late, changes nothing.

local wrong = foreign_state(STATE) or foreign_key({FENCE}, {HOLDS, WWAIT, RWAIT, RPASS}, {})
if wrong then
  return wrong
end
return rw_state(OWNER)
