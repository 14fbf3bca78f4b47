-- The state of a FairMutex and how its lock passes down the queue. Prepended
-- to the FairMutex scripts (see scripts.go). They take the same KEYS, in the
-- order of FairLayout (layout.go), which names them so in Lua; then the
-- call's and the hold's own, as each script says. All are in the lock
-- name's slot:
--
-- LOCK     lock key: a string holding the owner token, with a TTL, as a
--          Mutex's (so a Mutex's extend and TTL scripts serve a FairMutex)
-- FENCE    fencing counter (see mint_token in common.lua)
-- QUEUE    queue: sorted set of waiting entries by arrival, in microseconds
--          of the server's clock. An entry is the waiter's owner token
--          (OWNER_TOKEN_DIGITS hex digits) followed by 'client/id': its
--          client's tag and its waiter id, which its wake-up carries on
--          that client's own channel (the lock's channel followed by
--          ':client'), then the waiter's holder info if it has any (JSON:
--          it starts with '{'); or by a bare waiter id, woken on the
--          lock's channel.
-- REG      registrations: the same entries, scored by when each expires in
--          ms of the server's clock. A waiter renews its own while it
--          waits, so a dead waiter loses its place by itself.
-- CHANNEL  the lock's wake-up channel
-- HOLDER   the lock's holder info (set_holder_info in common.lua), as a
--          Mutex's: the holder's, and a hand-over's from its queue entry
-- TOMBSTONE the tombstone of this attempt (acquire and abandon only)

-- Drop the entries whose registration ran out.
local function purge_queue(now)
  drop_expired(REG, now, function(entry) redis.call('ZREM', QUEUE, entry) end)
end

-- The owner token a queue entry starts with, and the waiter's registration
-- after it.
local function entry_parts(entry)
  return entry:sub(1, OWNER_TOKEN_DIGITS), entry:sub(OWNER_TOKEN_DIGITS + 1)
end

-- Give the free lock to the first live waiter and tell it: the lock is set
-- to its owner token for as long as its registration has left (a waiter
-- that died after its last renewal so holds the lock up no longer than it
-- would have held its place; a live one renews the hold to its TTL), and
-- its fencing token is minted here, at the grant. A waiter queued with its
-- client's tag is told 'id:fence:px' on its client's own channel, and holds
-- the lock without another round trip; its latest attempt read the fencing
-- counter, so a fence above that says the hand-over is not older than the
-- attempt. A bare waiter id is published on the lock's channel, and tries
-- again. Returns whether it gave the lock. Nobody waits where the queue or
-- the registrations are missing or not dlock's (no TTL, or another type,
-- told by the first read's error), which are left as they are. with_info:
-- as hand_next's (hand_next.lua).
local function hand_over(publish, with_info)
  if with_info ~= false then
    drop_holder_info(HOLDER) -- the lock is being freed: whoever's it was, it is no longer
  end
  if redis.call('PTTL', QUEUE) < 0 or redis.call('PTTL', REG) < 0 then -- no clock, no purge
    return false
  end
  -- Both read before the purge writes either: a WRONGTYPE changes nothing.
  local head = call_or_wrongtype('ZRANGE', QUEUE, '0', '0')
  if head.err or #head == 0 then
    return false
  end
  local now = server_now()
  local dead = call_or_wrongtype('ZRANGEBYSCORE', REG, '-inf', now)
  if dead.err then
    return false
  end
  if #dead > 0 then
    for _, entry in ipairs(dead) do
      redis.call('ZREM', QUEUE, entry)
    end
    redis.call('ZREMRANGEBYSCORE', REG, '-inf', now)
    head = redis.call('ZRANGE', QUEUE, '0', '0')
    if #head == 0 then
      return false
    end
  end
  local entry = head[1]
  local owner, waiter = entry_parts(entry)
  local client, rest, ours = registration_parts(waiter)
  if not ours then -- of another protocol: freed, and woken
    redis.call('ZREM', QUEUE, entry)
    redis.call('ZREM', REG, entry)
    wake_waiter(CHANNEL, waiter, publish)
    return false
  end
  local left = math.floor(tonumber(redis.call('ZSCORE', REG, entry)) - now)
  local fence = mint_token(FENCE, left)
  if type(fence) ~= 'number' then -- a foreign counter: no token to hand over; the waiter's attempt says why
    wake_waiter(CHANNEL, waiter, publish)
    return false
  end
  redis.call('ZREM', QUEUE, entry)
  redis.call('ZREM', REG, entry)
  local id, info
  if client ~= nil then
    id, info = registered_id(rest)
  end
  give_lock(LOCK, HOLDER, owner, info, left)
  if id ~= nil then
    redis.call(publish, CHANNEL .. ':' .. client, handover_message(id, nil, fence, left))
  else
    redis.call(publish, CHANNEL, waiter)
  end
  return true
end

-- For fair_acquire.lua, defined once here rather than at every call.

-- The lock just set to this call's owner token: mint its token, take its
-- entry (if any) out of the queue, store its holder info. A foreign
-- counter undoes the hold, so that nothing outlives the script.
local function grant(entry)
  local fence = mint_token(FENCE, HOLD_TTL)
  if type(fence) == 'table' and fence.err then
    redis.call('DEL', LOCK)
    return fence
  end
  if entry ~= '' then
    redis.call('ZREM', QUEUE, entry)
    redis.call('ZREM', REG, entry)
  end
  if INFO ~= '' then
    set_holder_info(HOLDER, OWNER, INFO, HOLD_TTL)
  end
  return fence
end

-- Queue entry behind the holder, its registration lasting WAITER_TTL,
-- unless the call is void (its tombstone). The PTTLs, read before, are the
-- queue's and the registrations': they live as long as their last live
-- waiter, given twice a registration's time so that few registrations pay
-- a PEXPIRE. A ZADD's WRONGTYPE tells a key of another type; the other
-- ZADD is undone, so nothing changes.
local function queue_up(entry, void, queue_ttl, reg_ttl)
  if void then
    return {-1, 0}
  end
  local now, now_us = server_now()
  local added, wrong = call_on(QUEUE, 'ZADD', QUEUE, 'NX', now_us, entry)
  if wrong then
    return wrong
  end
  local lease = tonumber(WAITER_TTL)
  local _, reg_wrong = call_on(REG, 'ZADD', REG, now + lease, entry)
  if reg_wrong then
    if added == 1 then
      redis.call('ZREM', QUEUE, entry)
    end
    return reg_wrong
  end
  if queue_ttl < lease then
    redis.call('PEXPIRE', QUEUE, 2 * lease)
  end
  if reg_ttl < lease then
    redis.call('PEXPIRE', REG, 2 * lease)
  end
  return {0, redis.call('PTTL', LOCK), raise_error(token_floor(FENCE))}
end
