-- Report how long this owner's hold on a Mutex has left.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner token
--
-- Returns the milliseconds left (-1: no TTL), or -3 when not held by this owner.
--
-- Reads only: a copy, however late, changes nothing.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -3
