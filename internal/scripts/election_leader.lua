-- Who leads an Election.
--
-- KEYS     in the order of ElectionProclaimLayout (layout.go), by these names:
-- LOCK     lock key
-- LEADER   leader hash (see election_acquire.lua)
--
-- Returns {term, value}, or {} when nobody leads. The leader's owner token
-- is compared here and never returned.
--
-- Reads only: a copy, however late, changes nothing.

local holder = redis.call('GET', LOCK)
if not holder then
  return {}
end
local leader = redis.call('HMGET', LEADER, 'owner', 'term', 'value')
if leader[1] ~= holder then -- a leadership that was abandoned, not resigned
  return {}
end
return {tonumber(leader[2]), leader[3]}
