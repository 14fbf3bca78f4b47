-- Clean up after an acquire whose outcome the client does not know (it timed
-- out, was cancelled, or failed on the network): the attempt may have been
-- applied, or may still be on its way.
--
-- KEYS[1]  lock key
-- KEYS[2]  the lock's wake-up channel
-- KEYS[3]  the attempt's tombstone
-- ARGV[1]  owner token of the abandoned attempt
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- ARGV[3]  tombstone lifetime in milliseconds (the attempt's TTL)
--
-- Returns 1 the attempt had taken the lock and it is released now,
--         0 it had not; the tombstone makes it refuse itself should it arrive.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[2], KEYS[2], '1')
  return 1
end
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
return 0
