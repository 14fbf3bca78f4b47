-- Describe a Mutex as it is now, without changing it.
--
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter
-- KEYS[3]  waiters
--
-- Returns {held (1/0), ms left (-1: no TTL, 0: not held), live waiters
-- registered, the last fencing token minted}. Fails with WRONGTYPE when the
-- lock key is not a Mutex's. The holder's owner token is a secret and is not
-- returned.

local held, left = 0, 0
if redis.call('GET', KEYS[1]) then
  held = 1
  left = redis.call('PTTL', KEYS[1])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local waiting = redis.pcall('ZCOUNT', KEYS[3], '(' .. now, '+inf')
if type(waiting) ~= 'number' then
  waiting = 0
end
return {held, left, waiting, tonumber(redis.call('GET', KEYS[2])) or 0}
