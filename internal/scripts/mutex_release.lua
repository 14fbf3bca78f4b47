-- Release a Mutex held by this owner and hand it to the next waiter.
--
-- KEYS[1]  lock key
-- KEYS[2]  the lock's wake-up channel (declared as a key so a cluster routes
--          it to the lock's slot)
-- KEYS[3]  waiters: sorted set of registrations by expiry (hand_next.lua)
-- KEYS[4]  fencing counter, for the hand-over's token
-- KEYS[5]  the lock's holder info (hand_next.lua): removed, or the next
--          holder's; absent for a Redlock's release
-- KEYS[6]  this owner's release mark (see mark_released in common.lua);
--          absent for a Redlock's release
-- KEYS[7]  the call's tombstone, from a release that gives the call up
--          (see void_call in common.lua); absent otherwise
-- ARGV[1]  owner token
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- ARGV[3]  how long the mark lasts, in milliseconds
-- ARGV[4]  the tombstone's lifetime in milliseconds, when one is given
--
-- Returns 1 released (by this copy, or by an earlier copy of the same
-- release: the mark), 0 not held by this owner (expired, or someone else's).
--
-- The lock goes straight to a live Mutex waiter, inside this script: the
-- waiter holds it when the word arrives, one trip after the release left,
-- and neither the releaser taking it again nor a newcomer can barge in.
--
-- Safe to send twice: the second finds the key gone or another owner's, and
-- touches nothing; it finds the first one's mark, and reports the release.

void_call(KEYS[7], ARGV[4])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  hand_next(KEYS[1], KEYS[4], KEYS[3], KEYS[2], ARGV[2], KEYS[5])
  mark_released(KEYS[6], ARGV[3])
  return 1
end
if released_before(KEYS[6]) then
  return 1
end
return 0
