-- Change the value of the current leadership, keeping it.
--
-- KEYS     in the order of ElectionProclaimLayout (layout.go), by these names:
-- LOCK     lock key
-- LEADER   leader hash (see election_acquire.lua)
-- OBSERVERS observers' channel
-- ARGV     in the order of ProclaimArgs (args.go), by these names:
-- OWNER    owner token
-- VALUE    the new value
-- PUBLISH  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Returns 1 proclaimed, 0 not the leader.
--
-- Safe to send twice; a copy arriving late finds the leadership gone (an
-- owner token is never reused) and changes nothing.

if redis.call('GET', LOCK) ~= OWNER then
  return 0
end
redis.call('HSET', LEADER, 'value', VALUE)
redis.call(PUBLISH, OBSERVERS, redis.call('HGET', LEADER, 'term') .. ':' .. VALUE)
return 1
