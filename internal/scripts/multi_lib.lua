-- The locks of a MultiLock group: several Mutex locks taken and given up
-- together. Prepended to the MultiLock scripts (see scripts.go), after
-- hand_next.lua. Each script takes, for each lock of the group in the order
-- the client sorted them, the KEYS of MultiPartLayout (layout.go):
--
--   LOCK     lock key (a Mutex's: the owner token, with a TTL)
--   FENCE    fencing counter
--   WAITERS  sorted set of registrations by expiry (hand_next.lua)
--   CHANNEL  the lock's wake-up channel
--
-- then the call's or the hold's own, named as each script says. All are in
-- one cluster slot (the client groups the locks by slot), or on one server.
-- Every lock of a group holds the same owner token: that of the attempt
-- that took them all. scripts.go puts before this file N, the number of
-- locks, and part(i), the i-th lock's keys in that order.

-- Whether every lock of the group holds owner.
local function all_held(owner)
  for i = 1, N do
    if redis.call('GET', (part(i))) ~= owner then
      return false
    end
  end
  return true
end
