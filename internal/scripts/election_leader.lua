-- Who leads an Election.
--
-- KEYS[1]  lock key
-- KEYS[2]  leader hash (see election_acquire.lua)
--
-- Returns {term, value}, or {} when nobody leads. The leader's owner token
-- is compared here and never returned.
--
-- Reads only: a copy, however late, changes nothing.

local holder = redis.call('GET', KEYS[1])
if not holder then
  return {}
end
local leader = redis.call('HMGET', KEYS[2], 'owner', 'term', 'value')
if leader[1] ~= holder then -- a leadership that was abandoned, not resigned
  return {}
end
return {tonumber(leader[2]), leader[3]}
