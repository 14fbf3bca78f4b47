-- Describe a lock of any type for Client.Describe, in one step so that the
-- lock cannot change type between looking and reading: a string lock key
-- (a Mutex, FairMutex, Election, MultiLock's lock), a Semaphore, or else a
-- read-write lock, or nothing held (rw_state in rw_lib.lua).
--
-- KEYS     AnyLockLayout (layout.go): rw_lib.lua's STATE .. FENCE (a
--          Mutex's lock key, waiters and fencing counter are STATE, WWAIT
--          and FENCE; a Semaphore's holders and waiters STATE and WWAIT),
--          then every other type's keys, by their Lua names, and ANY,
--          which lists them by form (anyLockLocals)
-- ARGV     in the order of OwnerArgs (args.go), by these names:
-- OWNER    '' (no owner asks)
--
-- Returns for a string lock key {'mutex', held (1), ms left (-1: no TTL),
-- live waiters registered, the last fencing token minted, the holder's
-- info ('' none), its kind: 'election' where the holder leads an Election
-- (its leader record names it), else the kind a key beside it tells
-- (ANY.tells: 'fair' for a FairMutex's queue), else ''; and an Election
-- leader's value ('' otherwise)}; the holder's owner token is
-- a secret and is not returned. A FairMutex with nobody queued, and a
-- MultiLock's lock, look like a Mutex: nothing beside the key tells them
-- (why none can be added: docs/ARCHITECTURE.md).
-- For a Semaphore {'semaphore', permits held, ms until the last expires,
-- live waiters, the last fencing token, its number of permits}, followed
-- by the holder info of each permit held ('' none). Otherwise rw_state('').
-- Fails with WRONGTYPE when a key of the name holds what dlock did not
-- write (see foreign.lua): that is no holder, nor a lock at all.
--
-- Reads only: a copy, however late, changes nothing.

local wrong = foreign_lock(STATE, TOKENS, ANY)
if wrong then
  return wrong
end
local kind = redis.call('TYPE', STATE).ok
if kind == 'string' then
  local now = server_now()
  local holder = redis.call('GET', STATE)
  local sort, value = '', ''
  local leader = redis.call('HMGET', LEADER, 'owner', 'value') -- foreign_lock has checked it is dlock's
  if leader[1] == holder then
    sort, value = 'election', leader[2] or ''
  else
    for _, tell in ipairs(ANY.tells) do
      if redis.call('EXISTS', tell[1]) == 1 then
        sort = tell[2]
        break
      end
    end
  end
  return {'mutex', 1, redis.call('PTTL', STATE), live_waiters(WWAIT, now),
    raise_error(last_token(FENCE)), holder_info_of(HOLDER, holder) or '', sort, value}
end
if kind == 'zset' then
  local now = server_now()
  local held = redis.call('ZCOUNT', STATE, '(' .. now, '+inf')
  local ttl = 0
  if held > 0 then
    ttl = tonumber(redis.call('ZRANGE', STATE, '-1', '-1', 'WITHSCORES')[2]) - now
  end
  local reply = {'semaphore', held, ttl, live_waiters(WWAIT, now),
    raise_error(last_token(FENCE)), tonumber(redis.call('GET', PERMITS)) or 0}
  for _, owner in ipairs(redis.call('ZRANGEBYSCORE', STATE, '(' .. now, '+inf')) do
    reply[#reply + 1] = redis.call('HGET', TOKENS, 'i' .. owner) or ''
  end
  return reply
end
return rw_state(OWNER)
