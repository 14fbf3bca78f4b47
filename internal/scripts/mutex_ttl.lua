-- Report how long this owner's hold on a Mutex has left.
--
-- KEYS     in the order of MutexExtendLayout (layout.go), by these names:
-- LOCK     lock key
-- ARGV     in the order of OwnerArgs (args.go), by these names:
-- OWNER    owner token
--
-- Returns the milliseconds left (-1: no TTL), or -3 when not held by this owner.
--
-- Reads only: a copy, however late, changes nothing.

if redis.call('GET', LOCK) == OWNER then
  return redis.call('PTTL', LOCK)
end
return -3
