-- Acquire an RWMutex for reading or writing (a ReentrantMutex: writing).
--
-- KEYS     RWLayout (layout.go), then TOMBSTONE: as in rw_lib.lua
-- ARGV     in the order of RWAcquireArgs (args.go), by these names:
-- TAKEN_BY the type taking a write hold, for Describe: kept as the owner's
--          'aw' field (rw_lib.lua), which '' or absent (an RWMutex, an
--          older dlock) removes; a read ignores it
-- OWNER    member of the call's hold: mode .. hold id .. owner; every attempt
--          of the call sends the same
-- HOLD_TTL TTL in milliseconds
-- WAITER   waiter id to register when refused; '' for an attempt that will
--          not wait for a wake-up
-- WAITER_TTL how long a registration lasts, in milliseconds
-- INFO     the owner's holder info (JSON), kept in the state for the
--          owner's holds in this mode (rw_lib.lua); '' or absent: none
--
-- Returns token       acquired; token is the fencing token of the hold: new,
--                     or the one the owner's holds in this mode already share
--         {0, ms}     refused; ms is how long what blocks it may last at most
--         {-1, 0}     this attempt was abandoned by its client: do nothing
--         {-2, 0}     a write asked by an owner that holds only reads: an
--                     upgrade would deadlock with another upgrading reader.
--                     The waiter, if registered, is no longer.
-- Fails with WRONGTYPE, changing nothing, when a key holds what dlock did
-- not write (see foreign.lua: the state carries a mark).
--
-- Who may go:
--   write  the owner already writing (re-entry); else anyone, once nothing is
--          held and no passed reader is still on its way
--   read   the owner writing (it may keep reads past its write: downgrade) or
--          already reading (re-entry); else anyone while nobody writes, unless
--          a writer waits and this reader was not passed by the last writer
--
-- Safe to send twice: a hold already in place (its member is live) reports
-- the same acquisition, counts once, registers nothing (withdraws the
-- call's registration, made while the copy took it) and lasts the TTL
-- from now (a copy of an earlier attempt may have taken it while the call
-- slept, told it was refused; the call's lease counts from its latest
-- attempt); so does a copy of an earlier attempt of the call, refused,
-- arriving once a later one was granted. Safe to arrive late: a copy of any
-- attempt of a call that gave up finds the call's tombstone (TOMBSTONE) before
-- it takes a hold or registers, and does neither.

local member, waiter = OWNER, WAITER
local mode, owner = parse(member)

-- Clean: none of the lock's keys is there, nor the call's tombstone: a
-- free lock nobody waits for, told by one command. Nothing is left to
-- read, recognise (the counter is, where mint_token reads it), purge or
-- wait for, and what the grant writes is undone whole if a command is
-- refused (see granted below): the rights are checked once per Client
-- (rights.go). Elsewhere the counts of others' holds could be left half
-- changed, so they are checked at every call.
local clean = redis.call('EXISTS', STATE, HOLDS, WWAIT, RWAIT, RPASS, TOMBSTONE) == 0
local st = {}
if not clean then
  st = acquire_state(mode, owner) -- its WRONGTYPE tells a state of another type, before anything is written
  if st.err then
    return foreign_state(STATE)
  end
end
local wrong = rights_refused(STATE, not clean)
if wrong then
  return wrong
end
wrong = clean and refused_any(STATE, CLEAN_GRANT_RIGHTS)
if wrong then
  return wrong
end
if not clean then
  wrong = (not st[6] and foreign_state(STATE)) or foreign_key({FENCE}, {HOLDS, WWAIT, RWAIT, RPASS}, {})
  if wrong then
    return wrong
  end
end
local now = server_now()
if not clean and purge(now) > 0 then
  st = acquire_state(mode, owner)
end
-- No state (foreign_state above: no mark): any hold left in HOLDS lost its
-- count with it (DEL, FLUSHDB, an eviction), and is nobody's now.
local fresh = not st[6]
if not fresh and redis.call('ZSCORE', HOLDS, member) then
  -- Taken by a copy of an attempt of the call (one the caller was told
  -- was refused) or by this one's earlier copy: the lease counts from this
  -- attempt, so the hold lasts the TTL from now (never shorter).
  extend_score(HOLDS, member, now + tonumber(HOLD_TTL), false)
  expire_with_last()
  if waiter ~= '' then -- registered while that copy took it: no longer waiting
    redis.call('ZREM', mode == 'w' and WWAIT or RWAIT, waiter)
    redis.call('ZREM', RPASS, waiter)
  end
  return tonumber(st[5])
end

local writer, readers = st[1], tonumber(st[2]) or 0
local mine = tonumber(mode == 'w' and st[3] or st[4]) or 0
local my_reads = tonumber(st[4]) or 0

local granted
if mode == 'w' then
  if writer == owner then
    granted = true
  elseif my_reads > 0 then
    if waiter ~= '' then -- registered by an earlier attempt; the lock is held, no one to wake
      redis.call('ZREM', WWAIT, waiter)
    end
    return {-2, 0}
  else
    granted = not writer and readers == 0 and (clean or redis.call('ZCOUNT', RPASS, '(' .. now, '+inf') == 0)
  end
elseif writer then
  granted = writer == owner
elseif my_reads > 0 then
  granted = true
else
  granted = clean or redis.call('ZCOUNT', WWAIT, '(' .. now, '+inf') == 0
  if not granted and waiter ~= '' then
    granted = (tonumber(redis.call('ZSCORE', RPASS, waiter)) or 0) > now
  end
end

if granted then
  if not clean and redis.call('EXISTS', TOMBSTONE) == 1 then
    return {-1, 0}
  end
  if waiter ~= '' and not clean then -- on a clean lock no set of waiters is there
    redis.call('ZREM', mode == 'w' and WWAIT or RWAIT, waiter)
    redis.call('ZREM', RPASS, waiter)
  end
  -- The hold's fields, written by one HSET: the counts from the state as
  -- read above.
  local token = tonumber(st[5])
  -- Counts in digits: a number given to redis.call is formatted with %.17g.
  local fields = {'n' .. mode .. owner, mine == 0 and '1' or string.format('%d', mine + 1)}
  if mine == 0 then
    local digits
    token, digits = mint_token(FENCE, HOLD_TTL)
    token = raise_error(token) -- fails, before the hold is written, on a foreign counter
    add_field(fields, 't' .. mode .. owner, digits)
    if mode == 'w' then
      add_field(fields, 'W', owner)
    end
  end
  if mode == 'r' then
    add_field(fields, 'R', readers == 0 and '1' or string.format('%d', readers + 1))
  end
  if fresh then
    add_field(fields, STATE_MARK, STATE_KIND)
  end
  if INFO and INFO ~= '' then
    add_field(fields, 'i' .. mode .. owner, INFO)
  end
  if mode == 'w' and TAKEN_BY and TAKEN_BY ~= '' then
    add_field(fields, 'aw' .. owner, TAKEN_BY)
  elseif mode == 'w' and st[7] then -- never on a clean lock: there its rights are checked
    redis.call('HDEL', STATE, 'aw' .. owner)
  end
  -- In digits once: each number given to redis.call is formatted anew.
  local expiry = string.format('%d', now + tonumber(HOLD_TTL))
  if clean then
    -- The holds first, each key given its expiry as it is made: a refused
    -- command leaves none without one, and what was written goes (both
    -- keys were missing), the refusal failing the script.
    local ok, err = pcall(write_clean, member, expiry, fields)
    if not ok then
      redis.call('DEL', STATE, HOLDS)
      return type(err) == 'table' and err or redis.error_reply(tostring(err))
    end
    return token
  end
  redis.call('HSET', STATE, unpack(fields))
  if fresh then
    -- Holds left from a lost state go, or their leases would renew them
    -- (rw_extend.lua) while this one holds the lock.
    redis.call('DEL', HOLDS)
    redis.call('ZADD', HOLDS, expiry, member)
    redis.call('PEXPIREAT', STATE, expiry)
    redis.call('PEXPIREAT', HOLDS, expiry)
  else
    redis.call('ZADD', HOLDS, expiry, member)
    expire_with_last()
  end
  return token
end

if waiter ~= '' then
  if redis.call('EXISTS', TOMBSTONE) == 1 then
    return {-1, 0}
  end
  register_waiter(mode == 'w' and WWAIT or RWAIT, waiter, WAITER_TTL, now)
end
local last = redis.call('ZRANGE', HOLDS, '-1', '-1', 'WITHSCORES')
if #last == 0 then -- blocked by a waiting writer or passed readers, not by a hold
  return {0, tonumber(WAITER_TTL)}
end
return {0, tonumber(last[2]) - now}
