-- Report how long this owner's hold on a Mutex has left.
--
-- KEYS     in the order of MutexExtendLayout (layout.go), by these names:
-- LOCK     lock key
-- ARGV[1]  owner token
--
-- Returns the milliseconds left (-1: no TTL), or -3 when not held by this owner.
--
-- Reads only: a copy, however late, changes nothing.

if redis.call('GET', LOCK) == ARGV[1] then
  return redis.call('PTTL', LOCK)
end
return -3
