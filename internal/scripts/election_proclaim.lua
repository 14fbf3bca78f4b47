-- Change the value of the current leadership, keeping it.
--
-- KEYS     in the order of ElectionProclaimLayout (layout.go), by these names:
-- LOCK     lock key
-- LEADER   leader hash (see election_acquire.lua)
-- OBSERVERS observers' channel
-- ARGV[1]  owner token
-- ARGV[2]  the new value
-- ARGV[3]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Returns 1 proclaimed, 0 not the leader.
--
-- Safe to send twice; a copy arriving late finds the leadership gone (an
-- owner token is never reused) and changes nothing.

if redis.call('GET', LOCK) ~= ARGV[1] then
  return 0
end
redis.call('HSET', LEADER, 'value', ARGV[2])
redis.call(ARGV[3], OBSERVERS, redis.call('HGET', LEADER, 'term') .. ':' .. ARGV[2])
return 1
