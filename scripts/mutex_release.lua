-- Release a Mutex held by this owner and hand it to the next waiter.
--
-- KEYS[1]  lock key
-- KEYS[2]  the lock's wake-up channel (declared as a key so a cluster routes
--          it to the lock's slot)
-- KEYS[3]  waiters: sorted set of registrations by expiry (hand_next.lua)
-- KEYS[4]  fencing counter, for the hand-over's token
-- ARGV[1]  owner token
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Returns 1 released, 0 not held by this owner (expired, or someone else's).
--
-- The lock goes straight to a live Mutex waiter, inside this script: the
-- waiter holds it when the word arrives, one trip after the release left,
-- and neither the releaser taking it again nor a newcomer can barge in.
--
-- Safe to send twice: the second finds the key gone or another owner's, and
-- touches nothing.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  hand_next(KEYS[1], KEYS[4], KEYS[3], KEYS[2], ARGV[2])
  return 1
end
return 0
