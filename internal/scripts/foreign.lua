-- foreign.lua follows common.lua in every script (see scripts.go): how a
-- script recognises the keys dlock wrote, so that it fails with WRONGTYPE,
-- before writing anything, on a key of the lock that holds something else.
-- dlock never changes, deletes or counts as a holder what it did not write.
--
-- What dlock writes:
--   a Mutex's lock key (also a FairMutex's, a MultiLock's, an Election's):
--     a string, the holder's owner token (OWNER_TOKEN, made in scripts.go
--     from holder.go's length)
--   a read-write lock's state: a hash with the field STATE_MARK set to
--     STATE_KIND, written with its first hold
--   a Semaphore's holders: a sorted set, never without its tokens hash
--   a fencing counter, a Semaphore's number of permits: a string of digits
--   every other sorted set and hash beside a lock (holds, waiters, queues,
--     tokens): it goes with the last hold or registration, so has a TTL
--   an Election's leader: a hash of exactly 'owner', 'term' and 'value'
--   a Mutex's (FairMutex's) holder info: a string, the holder's owner token
--     followed by the info's JSON (HOLDER_INFO, made in scripts.go), with a
--     TTL; a forced removal's mark: a string, an owner token

local STATE_MARK, STATE_KIND = 'dlock', 'rw'

-- The error a script returns for key, which holds what (a value of that
-- type) that dlock did not write; or a Mutex's owner token, which another
-- type of lock read there.
local function not_dlocks(key, what)
  if redis.call('TYPE', key).ok == 'string' and string.find(redis.call('GET', key), OWNER_TOKEN) then
    return redis.error_reply('WRONGTYPE ' .. key .. " holds a Mutex's hold: another type of lock than this one")
  end
  return redis.error_reply('WRONGTYPE ' .. key .. ' holds ' .. what .. ' that dlock did not write')
end

-- The error to return for reply, the error reply of a command on key: a
-- WRONGTYPE naming the key, or reply itself (a right refused, say).
local function error_on(key, reply)
  if string.find(reply.err, 'WRONGTYPE', 1, true) then
    local kind = redis.call('TYPE', key).ok
    if kind == 'string' then
      return not_dlocks(key, 'a string')
    end
    return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. kind .. ": another type of lock's, or what dlock did not write")
  end
  return reply
end

-- redis.call of a command on key, which fails naming the key when the key
-- holds a value of another type: returns the reply, or nil and the error
-- to return.
local function call_on(key, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then
    return nil, error_on(key, reply)
  end
  return reply
end

-- call_on for a command whose reply is never a number (GET, SET ... GET):
-- .err tells its error reply, with no type() (see text_or_wrongtype).
local function text_call_on(key, ...)
  local reply = redis.pcall(...)
  if reply and reply.err then
    return nil, error_on(key, reply)
  end
  return reply
end

-- The holder a Mutex's lock key names (nil: free), once checks found
-- nothing wrong; or nil and the error to return: checks' (a right
-- refused, another program's key beside it) or the lock key's own.
local function checked_holder(lock, checks)
  if checks then
    return nil, checks
  end
  return text_call_on(lock, 'GET', lock)
end

-- Whether a string read under a Mutex's lock key is an owner token.
local function is_owner_token(value)
  return string.find(value, OWNER_TOKEN) ~= nil
end

-- The error when key, a Mutex's holder info (see holder_info.lua), holds
-- what dlock did not write there, or nil; nil for a key not given.
local function foreign_holder_info(key)
  if not key then
    return nil
  end
  local kind = redis.call('TYPE', key).ok
  if kind == 'none' then
    return nil
  end
  if kind ~= 'string' or not string.find(redis.call('GET', key), HOLDER_INFO) or redis.call('PTTL', key) < 0 then
    return not_dlocks(key, 'a ' .. kind)
  end
  return nil
end

-- The error when key, the mark of a forced removal (force_unlock.lua),
-- holds what dlock did not write there, or nil.
local function foreign_forced(key)
  local kind = redis.call('TYPE', key).ok
  if kind ~= 'none' and (kind ~= 'string' or not is_owner_token(redis.call('GET', key))) then
    return not_dlocks(key, 'a ' .. kind)
  end
  return nil
end

-- Whether key, a sorted set or hash beside a lock (want: 'zset' or
-- 'hash'), holds what dlock wrote there: a value of that type with a TTL.
-- Returns true; or false and nil when the key is missing; or false and
-- what the key holds when that is not dlock's. The one rule for these
-- keys: acquires refuse what it does not recognise (foreign_key), and
-- releases and abandons change only what it does, taking anything else
-- for nobody waiting. One command (PTTL) when the key is missing, the
-- case on a lock nobody waits for.
local function dlocks_beside(key, want)
  local ttl = redis.call('PTTL', key)
  if ttl == -2 then
    return false, nil
  end
  local kind = redis.call('TYPE', key).ok
  if kind ~= want then
    return false, 'a ' .. kind
  end
  if ttl == -1 then
    return false, 'a ' .. kind .. ' without a TTL'
  end
  return true
end

-- The error when key, a sorted set or hash beside a lock (want: 'zset' or
-- 'hash') whose PTTL the caller read (ttl), is not dlock's by
-- dlocks_beside's rule, or nil: nothing to ask when it is missing (-2),
-- else its TYPE. For the paths that touch no such key; one that does
-- learns the type from its command's WRONGTYPE (call_on).
local function beside_wrong(key, ttl, want)
  if ttl == -2 then
    return nil
  end
  local kind = redis.call('TYPE', key).ok
  if kind ~= want then
    return not_dlocks(key, 'a ' .. kind)
  end
  if ttl == -1 then
    return not_dlocks(key, 'a ' .. want .. ' without a TTL')
  end
  return nil
end

-- beside_wrong of waiters, a set of registrations; a registration learns
-- the type from its ZADD's WRONGTYPE.
local function waiters_wrong(waiters, ttl)
  return beside_wrong(waiters, ttl, 'zset')
end

-- Register waiter in waiters, a set whose PTTL the caller read (ttl), for
-- lease ms from now, to the µs: registrations in one ms line up as they
-- came. The ZADD's WRONGTYPE tells waiters of another type, changing
-- nothing: its error reply is returned. The set's life and dead entries
-- are tended only once its TTL is below a registration's: it is made to
-- last two, so most registrations cost no PEXPIRE (a release drops dead
-- entries too, as they come first: see pop_live).
local function enlist(waiters, waiter, lease, ttl)
  lease = tonumber(lease)
  local _, us = server_now()
  local now = us / 1000
  local _, wrong = call_on(waiters, 'ZADD', waiters, now + lease, waiter)
  if wrong then
    return wrong
  end
  if ttl < lease then
    if ttl ~= -2 then
      redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now)
    end
    redis.call('PEXPIRE', waiters, 2 * lease)
  end
  return nil
end

-- Whether a set of waiters may be popped (pop_live in common.lua): it has a
-- TTL, and pop_live's ZPOPMIN finds whether it is a sorted set, so that
-- only a sorted set with a TTL (dlocks_beside's rule) changes. One command
-- fewer than dlocks_beside, on every release that finds waiters.
local function poppable(waiters)
  return redis.call('PTTL', waiters) >= 0
end

-- The error for the first of these keys that holds what dlock did not
-- write there, or nil: counters may hold strings (their digits are checked
-- where they are read: last_token takes the GET here, see counter_reads),
-- zsets and hashes that type with a TTL (dlocks_beside). One command a
-- counter and one more when none of the others exists, which is the case
-- on a lock nobody waits for.
local function foreign_key(counters, zsets, hashes)
  for _, key in ipairs(counters) do
    if not counter_reads[key] then -- one read already (an MGET's) is a string
      local stored, wrong = text_call_on(key, 'GET', key)
      if wrong then
        return wrong
      end
      counter_reads[key] = stored or false
    end
  end
  local keys = {}
  for _, key in ipairs(zsets) do keys[#keys + 1] = key end
  for _, key in ipairs(hashes) do keys[#keys + 1] = key end
  -- One EXISTS for several keys; a single key's PTTL (dlocks_beside) says
  -- as much, and is needed when the key is there.
  if #keys == 0 or #keys > 1 and redis.call('EXISTS', unpack(keys)) == 0 then
    return nil
  end
  for i, key in ipairs(keys) do
    local _, what = dlocks_beside(key, i <= #zsets and 'zset' or 'hash')
    if what then
      return not_dlocks(key, what)
    end
  end
  return nil
end

-- Whether a read-write lock's state key holds dlock's state: a hash with
-- the mark. One command; false when the key is missing too.
local function is_dlocks_state(state)
  return call_or_wrongtype('HGET', state, STATE_MARK) == STATE_KIND
end

-- The error when a read-write lock's state key holds anything but dlock's
-- state, or nil.
local function foreign_state(state)
  local kind = redis.call('TYPE', state).ok
  if kind ~= 'none' and not is_dlocks_state(state) then
    return not_dlocks(state, 'a ' .. kind)
  end
  return nil
end

-- The error when a Semaphore's holders (or its tokens) are not dlock's, or
-- nil: holders never exist without their tokens, as both are written and
-- expire together (tokens may outlive holders removed by force).
local function foreign_semaphore(holders, tokens)
  if redis.call('EXISTS', holders) == 1 and redis.call('EXISTS', tokens) == 0 then
    return not_dlocks(holders, 'a ' .. redis.call('TYPE', holders).ok)
  end
  return foreign_key({}, {holders}, {tokens})
end

-- The error when a fencing counter is not dlock's (see last_token: digits,
-- below 2^53), or nil.
local function foreign_fence(fence)
  local token = last_token(fence)
  if type(token) == 'table' then
    return token
  end
  return nil
end

-- The error when a Semaphore's number of permits is not dlock's, a
-- number, or nil.
local function foreign_counter(key)
  local wrong = foreign_key({key}, {}, {})
  if wrong then
    return wrong
  end
  local stored = counter_reads[key] -- foreign_key's GET
  counter_reads[key] = nil
  if stored and not tonumber(stored) then
    return not_dlocks(key, 'a string')
  end
  return nil
end

-- The error when an Election's leader key holds anything but dlock's
-- record of the leadership, or nil.
local function foreign_leader(leader)
  local kind = redis.call('TYPE', leader).ok
  if kind == 'none' then
    return nil
  end
  if kind ~= 'hash' then
    return not_dlocks(leader, 'a ' .. kind)
  end
  local record = redis.call('HMGET', leader, 'owner', 'term', 'value')
  if redis.call('HLEN', leader) ~= 3 or not (record[1] and record[2] and record[3]) then
    return not_dlocks(leader, 'a hash')
  end
  return nil
end

-- The error when a key of a lock name, whatever its lock's type, holds what
-- dlock did not write, or nil: for the scripts that work on any lock. lock
-- is its main key, tokens a Semaphore's; keys lists the others by form
-- (ANY, made from the layouts by anyLockLocals in layout.go).
local function foreign_lock(lock, tokens, keys)
  local kind = redis.call('TYPE', lock).ok
  local wrong
  if kind == 'string' then
    if not is_owner_token(redis.call('GET', lock)) then
      wrong = not_dlocks(lock, 'a string')
    end
  elseif kind == 'hash' then
    wrong = foreign_state(lock)
  elseif kind == 'zset' then
    wrong = foreign_semaphore(lock, tokens)
  elseif kind ~= 'none' then
    wrong = not_dlocks(lock, 'a ' .. kind)
  end
  wrong = wrong or foreign_key({}, keys.zsets, keys.hashes)
  for _, form in ipairs({{foreign_fence, keys.fences}, {foreign_counter, keys.numbers},
      {foreign_leader, keys.leaders}, {foreign_holder_info, keys.holders}, {foreign_forced, keys.forced}}) do
    for _, key in ipairs(form[2]) do
      wrong = wrong or form[1](key)
    end
  end
  return wrong
end
