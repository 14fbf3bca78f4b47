-- Resign from an Election (release its lock) and wake the next candidate.
--
-- KEYS     in the order of ElectionReleaseLayout (layout.go), by these names:
-- LOCK     lock key; its name followed by CHANNEL_SUFFIX is the
--          candidates' wake-up channel, made only where one is woken (a
--          KEYS element less on every release)
-- WAITERS  candidates waiting: sorted set of waiter ids by registration expiry
-- LEADER   leader hash (see election_acquire.lua)
-- RELEASE_MARK this leadership's release mark (see mark_released in common.lua)
-- TOMBSTONE the call's tombstone, from a release that gives the call up
--          (see void_call in common.lua); absent otherwise
-- ARGV     in the order of ReleaseArgs (args.go), by these names:
-- OWNER    owner token
-- PUBLISH  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- TOKEN    the leadership's term (its fencing token), when given
--
-- Returns 1 resigned (by this copy, or by an earlier copy of the same
-- release: the mark), 0 not the leader (its term ended, or another's).
-- A leadership of this owner's under another term (a late copy of the
-- campaign that elected it took the lapsed lock again, minting anew,
-- maybe after another led) is resigned all the same, and answers 0,
-- leaving no mark, unless a copy of this release let go first (its mark):
-- then the leadership lasted until that copy.
--
-- The leader hash goes with the leadership; observers learn of the next
-- leader when it is elected. It is deleted only as this leadership's
-- record (its owner is the secret owner token): one command more, where
-- foreign_leader would take three, and it never deletes what another
-- program wrote there.
--
-- Safe to send twice, and to arrive late: a copy finds the lock gone or
-- another's, and touches nothing; it finds the first one's mark, and
-- reports the resignation.

if TOMBSTONE then -- a call given up; most releases name none: no call
  void_call(TOMBSTONE, VOID_TTL)
end
if redis.call('GET', LOCK) ~= OWNER then
  return nothing_released(RELEASE_MARK)
end
local retaken = false
local record = text_or_wrongtype('HMGET', LEADER, 'owner', 'term') -- a table, or an error reply where another type is
if record[1] == OWNER then
  -- The term the release names, most often: minted_anew's first test,
  -- without a call.
  retaken = record[2] ~= TOKEN and minted_anew(record[2], TOKEN, RELEASE_MARK)
  redis.call('DEL', LOCK, LEADER)
else -- a record another program wrote there stays
  redis.call('DEL', LOCK)
end
-- wake_next's steps (wake_next.lua), the channel made after the pop.
if poppable(WAITERS) then
  local waiter = pop_live(WAITERS)
  if waiter ~= nil then
    wake_waiter(LOCK .. CHANNEL_SUFFIX, waiter, PUBLISH)
  end
end
if retaken then
  return 0
end
mark_released(RELEASE_MARK, MARK_TTL)
return 1
