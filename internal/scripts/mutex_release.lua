-- Release a Mutex held by this owner and hand it to the next waiter.
--
-- KEYS     in the order of MutexReleaseLayout (layout.go), by these names:
-- LOCK     lock key
-- CHANNEL  the lock's wake-up channel (declared as a key so a cluster routes
--          it to the lock's slot)
-- WAITERS  waiters: sorted set of registrations by expiry (hand_next.lua)
-- FENCE    fencing counter, for the hand-over's token
-- HOLDER   the lock's holder info (hand_next.lua): removed, or the next
--          holder's; absent for a Redlock's release
-- RELEASE_MARK this owner's release mark (see mark_released in common.lua);
--          absent for a Redlock's release
-- TOMBSTONE the call's tombstone, from a release that gives the call up
--          (see void_call in common.lua); absent otherwise
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
-- first copy let go) is released, and answers 1. Fails with WRONGTYPE
-- naming the lock key, leaving it as it is, when it holds a value of
-- another type; the MGET reads one as missing, so only then a GET looks.
--
-- The lock goes straight to a live Mutex waiter, inside this script: the
-- waiter holds it when the word arrives, one trip after the release left,
-- and neither the releaser taking it again nor a newcomer can barge in.
--
-- Safe to send twice: the second finds the key gone or another owner's, and
-- touches nothing; it finds the first one's mark, and reports the release.

if TOMBSTONE then -- a call given up; most releases name none: no call
  void_call(TOMBSTONE, VOID_TTL)
end
-- The counter, for taken_since, is read with the lock; a Redlock's release
-- gives no token, and reads the lock alone (a reply of one value costs
-- less), as a GET tells one of another type at once.
local holder, wrong
if TOKEN then
  holder = read_lock(LOCK, FENCE)
else
  holder, wrong = text_call_on(LOCK, 'GET', LOCK)
  if wrong then
    return wrong
  end
end
if holder == OWNER then
  -- taken_since's first test, without a call: the counter read with the lock.
  local retaken = counter_reads[FENCE] ~= TOKEN and taken_since(FENCE, TOKEN, RELEASE_MARK)
  hand_next(LOCK, FENCE, WAITERS, CHANNEL, PUBLISH, HOLDER, WITH_INFO ~= '0')
  if retaken then
    return 0
  end
  mark_released(RELEASE_MARK, MARK_TTL)
  return 1
end
if not holder and TOKEN then
  -- MGET reads a key of another type as missing: GET tells it.
  local _, foreign = text_call_on(LOCK, 'GET', LOCK)
  if foreign then
    return foreign
  end
end
if released_before(RELEASE_MARK) then
  return 1
end
return 0
