-- Change the value of the current leadership, keeping it.
--
-- KEYS[1]  lock key
-- KEYS[2]  leader hash (see election_acquire.lua)
-- KEYS[3]  observers' channel
-- ARGV[1]  owner token
-- ARGV[2]  the new value
-- ARGV[3]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Returns 1 proclaimed, 0 not the leader.
--
-- Safe to send twice; a copy arriving late finds the leadership gone (an
-- owner token is never reused) and changes nothing.

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[2], 'value', ARGV[2])
redis.call(ARGV[3], KEYS[3], redis.call('HGET', KEYS[2], 'term') .. ':' .. ARGV[2])
return 1
