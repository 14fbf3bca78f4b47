-- Describe a lock of any type for Client.Describe, in one step so that the
-- lock cannot change type between looking and reading. Prepended to
-- rw_inspect.lua (see scripts.go), which describes a read-write lock, or
-- nothing held; this part answers for a Mutex, whose key is a string.
--
-- KEYS[1..8] as in rw_lib.lua (a Mutex's key, waiters and fencing counter
-- are KEYS[1], KEYS[3] and KEYS[8]; a Semaphore's holders and waiters
-- KEYS[1] and KEYS[3])
-- KEYS[9]  a Semaphore's number of permits
-- KEYS[10..12]  a Semaphore's tokens, a FairMutex's queue, an Election's
--          leader (looked at only to tell they are dlock's)
-- KEYS[13] the mark of a forced removal (force_unlock.lua)
-- KEYS[14] a Mutex's (FairMutex's) holder info (set_holder_info in common.lua)
-- ARGV[1]  '' (no owner asks)
--
-- Returns for a Mutex or FairMutex {'mutex', held (1/0), ms left (-1: no
-- TTL), live waiters registered, the last fencing token minted, the
-- holder's info ('' none), 'election' (the holder leads an Election: its
-- leader record names it), 'fair' (a FairMutex's queue is beside it) or
-- '', and an Election leader's value ('' otherwise)}; the holder's owner
-- token is a secret and is not returned. A FairMutex with nobody queued,
-- and a MultiLock's part, look like a Mutex. For a Semaphore
-- {'semaphore', permits held, ms until the last expires, live waiters, the
-- last fencing token, its number of permits}, followed by the holder info
-- of each permit held ('' none). Otherwise what rw_inspect.lua
-- returns. Fails with WRONGTYPE when a key of the name holds what dlock did
-- not write (see foreign.lua): that is no holder, nor a lock at all.
--
-- Reads only: a copy, however late, changes nothing.

local wrong = foreign_lock(STATE, KEYS[8], KEYS[9], KEYS[10], KEYS[12], {HOLDS, WWAIT, RWAIT, RPASS, KEYS[11]},
  KEYS[14], KEYS[13])
if wrong then
  return wrong
end
local kind = redis.call('TYPE', STATE).ok
if kind == 'string' then
  local now = server_now()
  local holder = redis.call('GET', STATE)
  local sort, value = '', ''
  local leader = redis.call('HMGET', KEYS[12], 'owner', 'value') -- foreign_lock has checked it is dlock's
  if leader[1] == holder then
    sort, value = 'election', leader[2] or ''
  elseif redis.call('EXISTS', KEYS[11]) == 1 then
    sort = 'fair'
  end
  return {'mutex', 1, redis.call('PTTL', STATE), live_waiters(WWAIT, now),
    raise_error(last_token(KEYS[8])), holder_info_of(KEYS[14], holder) or '', sort, value}
end
if kind == 'zset' then
  local now = server_now()
  local held = redis.call('ZCOUNT', STATE, '(' .. now, '+inf')
  local ttl = 0
  if held > 0 then
    ttl = tonumber(redis.call('ZRANGE', STATE, -1, -1, 'WITHSCORES')[2]) - now
  end
  local reply = {'semaphore', held, ttl, live_waiters(WWAIT, now),
    raise_error(last_token(KEYS[8])), tonumber(redis.call('GET', KEYS[9])) or 0}
  for _, owner in ipairs(redis.call('ZRANGEBYSCORE', STATE, '(' .. now, '+inf')) do
    reply[#reply + 1] = redis.call('HGET', KEYS[10], 'i' .. owner) or ''
  end
  return reply
end
