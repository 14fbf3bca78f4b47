-- Resign from an Election (release its lock) and wake the next candidate.
--
-- KEYS     in the order of ElectionReleaseLayout (layout.go), by these names:
-- LOCK     lock key
-- CHANNEL  the candidates' wake-up channel
-- WAITERS  candidates waiting: sorted set of waiter ids by registration expiry
-- LEADER   leader hash (see election_acquire.lua)
-- RELEASE_MARK this leadership's release mark (see mark_released in common.lua)
-- TOMBSTONE the call's tombstone, from a release that gives the call up
--          (see void_call in common.lua); absent otherwise
-- ARGV[1]  owner token
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- ARGV[3]  how long the mark lasts, in milliseconds
-- ARGV[4]  the tombstone's lifetime in milliseconds, when one is given (a
--          place-holder otherwise, when ARGV[5] follows)
-- ARGV[5]  the leadership's term (its fencing token), when given
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

void_call(TOMBSTONE, ARGV[4])
if redis.call('GET', LOCK) ~= ARGV[1] then
  return nothing_released(RELEASE_MARK)
end
local retaken = false
local record = call_or_wrongtype('HMGET', LEADER, 'owner', 'term') -- an error reply where another type is
if record[1] == ARGV[1] then
  retaken = minted_anew(record[2], ARGV[5], RELEASE_MARK)
  redis.call('DEL', LOCK, LEADER)
else -- a record another program wrote there stays
  redis.call('DEL', LOCK)
end
wake_next(WAITERS, CHANNEL, ARGV[2])
if retaken then
  return 0
end
mark_released(RELEASE_MARK, ARGV[3])
return 1
