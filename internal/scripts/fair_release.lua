-- Release a FairMutex held by this owner and hand it to the first waiter.
--
-- KEYS     FairLayout (layout.go), as in fair_lib.lua, then:
-- RELEASE_MARK  this owner's release mark (see mark_released in common.lua)
-- TOMBSTONE     the call's tombstone, from a release that gives the call up
--               (see void_call in common.lua); absent otherwise
-- ARGV     in the order of ReleaseArgs (args.go), by these names:
-- OWNER    owner token
-- PUBLISH  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- TOKEN    the hold's fencing token, when given
-- WITH_INFO '0' when the hold was taken without holder info: none to remove
--
-- Returns 1 released (by this copy, or by an earlier copy of the same
-- release: the mark), 0 not held by this owner (expired, or someone else's)
-- since its grant: a hold taken anew since (taken_since in common.lua) is
-- released all the same, and answers 0, leaving no mark; one taken anew
-- after this release's mark (a resend's, the hold having lasted until the
-- first copy let go) is released, and answers 1.
--
-- The lock goes straight to the head of the queue, inside this script:
-- neither the releaser nor a newcomer can take it in between.
--
-- Safe to send twice, and to arrive late: a copy finds the lock gone or
-- another owner's, and touches nothing; it finds the first one's mark, and
-- reports the release.

if TOMBSTONE then -- a call given up; most releases name none: no call
  void_call(TOMBSTONE, VOID_TTL)
end
local holder = read_lock(LOCK, FENCE)
if holder ~= OWNER then
  if not holder then -- MGET reads a key of another type as missing: GET fails on it
    redis.call('GET', LOCK)
  end
  return nothing_released(RELEASE_MARK)
end
-- taken_since's first test, without a call: the counter read with the lock.
local retaken = counter_reads[FENCE] ~= TOKEN and taken_since(FENCE, TOKEN, RELEASE_MARK)
if not hand_over(PUBLISH, WITH_INFO ~= '0') then
  redis.call('DEL', LOCK)
end
if retaken then
  return 0
end
mark_released(RELEASE_MARK, MARK_TTL)
return 1
