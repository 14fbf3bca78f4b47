-- The state of an RWMutex, and of a ReentrantMutex (an RWMutex used only
-- for writing), and what every script of theirs does with it. Prepended to
-- those scripts (see scripts.go). Each script takes the same KEYS, as many of
-- them as it uses, in the order of RWLayout (layout.go), which names them
-- so in Lua; then the call's and the hold's own, as each script says. All
-- are in the lock name's slot:
--
-- STATE    state: hash of counts, gone with the last hold
--            'nw'..owner / 'nr'..owner  that owner's live write / read holds
--            'tw'..owner / 'tr'..owner  their fencing token: every hold of
--                                       one owner in one mode shares it
--            'W'                        the owner holding the write side
--            'R'                        read holds of all owners
--            'dlock' = 'rw'             the mark of a state dlock wrote
--                                       (foreign.lua)
--            'iw'..owner / 'ir'..owner  that owner's holder info (JSON,
--                                       WithHolderInfo in Go) on that
--                                       side, from its latest hold with
--                                       info; gone with its last hold there
--            'aw'..owner                the type that took that owner's
--                                       latest write hold, where Describe
--                                       tells it (rw_acquire.lua's TAKEN_BY:
--                                       a LockType's name from Go, kept as
--                                       is); absent for an RWMutex, and for
--                                       holds of dlock before it (an older
--                                       release or purge leaves it until the
--                                       state goes: read only for an owner
--                                       writing); gone with its last write
-- HOLDS    holds: sorted set, one member per hold (per Lease), scored by when
--          it expires in ms of the server's clock. A member is
--          mode .. hold id .. owner: mode 'w' or 'r', the hold id
--          OWNER_TOKEN_DIGITS random hex digits (a secret: it is the proof
--          a Lease shows), the owner id the rest. Each hold expires on its
--          own, so a crashed holder stops blocking others within its TTL
--          while other holders renew theirs.
-- WWAIT    writers waiting: sorted set of waiter ids by registration expiry.
--          While a live one is there, owners not yet holding the lock may not
--          start reading (writer preference).
-- RWAIT    readers waiting: sorted set of waiter ids by registration expiry
-- RPASS    readers passed: the readers that were waiting when a writer left.
--          They go before any writer, so writers cannot starve readers.
-- WCHAN    the writers' wake-up channel (a waiter id is published)
-- RCHAN    the readers' wake-up channel ('*' wakes them all)
-- FENCE    fencing counter (see mint_token in common.lua; acquire only)
-- TOMBSTONE the tombstone of this hold id (acquire and abandon only)

-- A release takes its mark (RELEASE_MARK) in FENCE's place.

-- The mode and owner of a hold.
local function parse(member)
  return member:sub(1, 1), member:sub(OWNER_TOKEN_DIGITS + 2)
end

-- The state's fields an acquire by owner in mode reads (rw_acquire.lua),
-- or the error reply where the state is of another type. A helper of the
-- library, not of the call: a closure made per call costs (library.go).
local function acquire_state(mode, owner)
  return call_or_wrongtype('HMGET', STATE, 'W', 'R', 'nw' .. owner, 'nr' .. owner, 't' .. mode .. owner, STATE_MARK, 'aw' .. owner)
end

-- Append a field and its value to fields, the arguments of one HSET.
local function add_field(fields, name, value)
  fields[#fields + 1], fields[#fields + 2] = name, value
end

-- Write a hold on a clean lock (rw_acquire.lua): the holds first, each key
-- given its expiry as it is made.
local function write_clean(member, expiry, fields)
  redis.call('ZADD', HOLDS, expiry, member)
  redis.call('PEXPIREAT', HOLDS, expiry)
  redis.call('HSET', STATE, unpack(fields))
  redis.call('PEXPIREAT', STATE, expiry)
end

-- A clean grant undoes itself with DEL, and gives each key its expiry as
-- it makes it: rights known before may have been revoked since, and
-- without these two a refusal would leave a key held for good. One table
-- for every call (refused_any only reads it).
local CLEAN_GRANT_RIGHTS = {'del', 'pexpireat'}

-- Take one hold out of the counts; returns its mode and what its owner
-- still holds in that mode. present: whether the state is there, when the
-- caller has looked (nil: forget looks).
local function forget(member, present)
  local mode, owner = parse(member)
  if present == false or (present == nil and not is_dlocks_state(STATE)) then
    -- Gone (evicted, deleted): counting down would write a state without
    -- the mark, which every other hold's renewal would then refuse.
    return mode, 0
  end
  local left = redis.call('HINCRBY', STATE, 'n' .. mode .. owner, '-1')
  if left <= 0 and mode == 'w' then
    redis.call('HDEL', STATE, 'nw' .. owner, 'tw' .. owner, 'iw' .. owner, 'aw' .. owner, 'W')
  elseif left <= 0 then
    redis.call('HDEL', STATE, 'nr' .. owner, 'tr' .. owner, 'ir' .. owner)
  end
  if mode == 'r' then
    redis.call('HINCRBY', STATE, 'R', '-1')
  end
  return mode, left
end

-- Drop the holds that expired; returns how many (present as for forget).
local function purge(now, present)
  return drop_expired(HOLDS, now, function(member) return forget(member, present) end)
end

-- The state lives as long as its last hold, and no longer. last: the
-- holds' last entry, when the caller has read it.
local function expire_with_last(last)
  last = last or redis.call('ZRANGE', HOLDS, '-1', '-1', 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', STATE, HOLDS)
  else
    redis.call('PEXPIREAT', STATE, last[2])
    redis.call('PEXPIREAT', HOLDS, last[2])
  end
end

-- How many live registrations a waiter set has. A set dlock did not write
-- (dlocks_beside in foreign.lua) counts as empty: waking nobody beats
-- failing a release.
local function live_waiters(set, now)
  if not dlocks_beside(set, 'zset') then
    return 0
  end
  return redis.call('ZCOUNT', set, '(' .. now, '+inf')
end

-- Wake the writer whose registration runs out first: the one that has
-- refreshed it least recently. It stays registered, so readers keep
-- waiting until it has had its turn.
local function wake_writer(publish, now)
  if not dlocks_beside(WWAIT, 'zset') then
    return false
  end
  local first = redis.call('ZRANGEBYSCORE', WWAIT, '(' .. now, '+inf', 'LIMIT', '0', '1')
  if #first == 0 then
    return false
  end
  redis.call(publish, WCHAN, first[1])
  return true
end

-- Wake whoever can go now that a hold has gone. writer_left: the write side
-- just became free. Readers that were waiting for that writer go first (all
-- of them, passed ahead of waiting writers); otherwise, once nothing is
-- held, one writer, or if none waits, all readers. Readers passed where
-- dlock did not write them (dlocks_beside) are woken but not recorded: the
-- value there is left as it is. held: whether holds are left, when the
-- caller has read it.
local function wake(publish, now, writer_left, held)
  if held == nil then
    held = redis.call('ZCARD', HOLDS) > 0
  end
  if held and not writer_left or redis.call('EXISTS', RWAIT, WWAIT) == 0 then
    return -- nobody to wake (one command for both sets, where nobody waits)
  end
  local readers_waiting = live_waiters(RWAIT, now) > 0
  if writer_left and readers_waiting then
    local _, foreign = dlocks_beside(RPASS, 'zset')
    if not foreign then
      redis.call('RENAME', RWAIT, RPASS)
    end
    redis.call(publish, RCHAN, '*')
  elseif not held and not wake_writer(publish, now) and readers_waiting then
    redis.call(publish, RCHAN, '*')
  end
end

-- Release one live hold and wake whoever can go: nil, or the error when
-- another program wrote over the state, which is left as it is. The wake's
-- PUBLISH comes last: one an ACL refuses finds the hold released. present
-- is is_dlocks_state(STATE), when the caller has read it; expired false
-- when the caller has seen that no hold expired.
local function release_hold(member, publish, now, present, expired)
  if present == nil then
    present = is_dlocks_state(STATE) -- the counts below change only what is there: it stays
  end
  local wrong = not present and foreign_state(STATE)
  if wrong then
    return wrong
  end
  if expired ~= false then
    purge(now, present) -- only holds with this hold in them: its id is secret, so dlock wrote them
  end
  redis.call('ZREM', HOLDS, member)
  local mode, left = forget(member, present)
  local last = redis.call('ZRANGE', HOLDS, '-1', '-1', 'WITHSCORES') -- expire_with_last and wake read it
  expire_with_last(last)
  wake(publish, now, mode == 'w' and left <= 0, #last > 0)
  return nil
end

-- rw_state is a read-write lock as it is now, as owner ('' for nobody)
-- sees it, for rw_inspect.lua and describe.lua: {write holds, read holds,
-- reading owners, the writer is owner (1/0), owner's read holds, ms until
-- the last hold expires (0: none), writers waiting, readers waiting, the
-- write side's fencing token (0: none), the last fencing token minted},
-- followed by owner, mode, holds, holder info ('' none) and the type that
-- took its latest hold in that mode (its 'aw' field; '' none) for each
-- holder (the writer first). Counted from the live holds, so expired ones
-- not yet purged do not show. Reads only.
local function rw_state(owner)
  local now = server_now()
  local writes, reads, own_reads, writer_is_owner, last = 0, 0, 0, 0, now
  local readers = {}
  local n_readers = 0
  local holders = {} -- owner .. mode -> holds
  local order = {}
  local live = redis.call('ZRANGEBYSCORE', HOLDS, '(' .. now, '+inf', 'WITHSCORES')
  for i = 1, #live, 2 do
    local mode, holder = parse(live[i])
    local id = mode .. holder
    if not holders[id] then
      holders[id] = 0
      if mode == 'w' then
        table.insert(order, 1, id)
      else
        table.insert(order, id)
      end
    end
    holders[id] = holders[id] + 1
    if mode == 'w' then
      writes = writes + 1
      if holder == owner then
        writer_is_owner = 1
      end
    else
      reads = reads + 1
      if not readers[holder] then
        readers[holder] = true
        n_readers = n_readers + 1
      end
      if holder == owner then
        own_reads = own_reads + 1
      end
    end
    last = math.max(last, tonumber(live[i + 1]))
  end
  local token = 0
  local writer = redis.call('HGET', STATE, 'W')
  if writes > 0 and writer then
    token = tonumber(redis.call('HGET', STATE, 'tw' .. writer)) or 0
  end
  local reply = {writes, reads, n_readers, writer_is_owner, own_reads, last - now,
    live_waiters(WWAIT, now), live_waiters(RWAIT, now), token,
    raise_error(last_token(FENCE))}
  for _, id in ipairs(order) do
    table.insert(reply, id:sub(2))
    table.insert(reply, id:sub(1, 1))
    table.insert(reply, holders[id])
    table.insert(reply, redis.call('HGET', STATE, 'i' .. id) or '')
    table.insert(reply, redis.call('HGET', STATE, 'a' .. id) or '')
  end
  return reply
end
