-- The locks of a MultiLock group: several Mutex locks taken and given up
-- together. Prepended to the MultiLock scripts (see scripts.go), after
-- hand_next.lua. Each script takes, for each lock of the group in the order
-- the client sorted them, four KEYS:
--
--   lock key (a Mutex's: the owner token, with a TTL), fencing counter,
--   waiters (sorted set of registrations by expiry: hand_next.lua), channel
--
-- then, for acquire and abandon, the attempt's tombstone. All are in one
-- cluster slot (the client groups the locks by slot), or on one server.
-- Every lock of a group holds the same owner token: that of the attempt
-- that took them all.

local N = math.floor(#KEYS / 4)

-- The keys of the i-th lock: lock, fence, waiters, channel.
local function part(i)
  return KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
end

-- Whether every lock of the group holds owner.
local function all_held(owner)
  for i = 1, N do
    local lock = part(i)
    if redis.call('GET', lock) ~= owner then
      return false
    end
  end
  return true
end
