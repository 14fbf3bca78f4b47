-- Resign from an Election (release its lock) and wake the next candidate.
--
-- KEYS[1]  lock key
-- KEYS[2]  the candidates' wake-up channel
-- KEYS[3]  candidates waiting: sorted set of waiter ids by registration expiry
-- KEYS[4]  leader hash (see election_acquire.lua)
-- ARGV[1]  owner token
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Returns 1 resigned, 0 not the leader (its term ended, or another's).
--
-- The leader hash goes with the leadership; observers learn of the next
-- leader when it is elected.

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[4])
wake_next(KEYS[3], KEYS[2], ARGV[2])
return 1
