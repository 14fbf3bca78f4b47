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
-- then the call's or the hold's own, named as each script says. They come
-- key by key (partLocals in layout.go): every lock's LOCK, then every
-- lock's FENCE, and so on, so that a command on one key of each lock takes
-- a range of KEYS (unpack(KEYS, LOCK_FROM, LOCK_TO)). All are in
-- one cluster slot (the client groups the locks by slot), or on one server.
-- Every lock of a group holds the same owner token: that of the attempt
-- that took them all. scripts.go puts before this file N, the number of
-- locks, part(i), the i-th lock's keys in that order, and the ranges.

-- Whether every lock of the group holds owner.
local function all_held(owner)
  for i = 1, N do
    if redis.call('GET', (part(i))) ~= owner then
      return false
    end
  end
  return true
end

-- Take every lock of a group found free, nobody waiting and the call
-- without a tombstone (multi_acquire.lua): stored is what MGET read of the
-- counters (false: missing). The tokens, or the error reply of a counter
-- not dlock's, with nothing written.
-- The most locks whose keys one EXISTS asks: Lua unpacks fewer than
-- 8,000 values (LUAI_MAXCSTACK) onto a stack in use, so a larger group
-- (up to 3,999 locks) takes the long way.
local FAST_PARTS = 2600

local function take_free(stored, owner, ttl)
  local keys = {unpack(KEYS, LOCK_FROM, FENCE_TO)} -- made at its size: no table grows
  local lasts = {unpack(stored)}
  for i = 1, N do
    local fence = keys[N + i]
    counter_reads[fence] = stored[i]
    local last = last_token(fence)
    if type(last) ~= 'number' then
      return last
    end
    lasts[i] = last
  end
  local tokens = {1, unpack(stored)}
  for i = 1, N do
    tokens[i + 1] = mint_token(keys[N + i], ttl, lasts[i])
    redis.call('SET', keys[i], owner, 'PX', ttl)
  end
  return tokens
end
