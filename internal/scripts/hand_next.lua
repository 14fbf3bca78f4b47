-- hand_next(lock, fence, waiters, channel, publish, holder, with_info): pass a Mutex lock that
-- is being freed to its next live waiter. Prepended to the scripts that free
-- a Mutex's (or a MultiLock's) lock (see scripts.go); the caller owns the lock
-- or found it free.
--
-- lock     the lock key; set to the next waiter's owner token, or deleted
-- fence    the lock's fencing counter
-- waiters  sorted set of registrations by expiry, in ms of the server's clock
--          (renewed while their waiters wait, so a dead one runs out)
-- channel  the lock's wake-up channel
-- publish  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- holder   the lock's holder info (see set_holder_info in common.lua): the
--          releaser's goes, the next holder's comes from its registration;
--          nil where the caller keeps none (a MultiLock's)
-- with_info false when the releaser's hold was taken without holder info:
--          nothing of its to remove, nothing read
--
-- A registration is a waiter id alone, or after its client's tag (a
-- MultiLock's or an Election's waiter: it is woken, see wake_waiter in
-- common.lua, and tries again), or 'client/id:attempt:ttl:owner' followed
-- by the waiter's holder info, if any (a Mutex waiter: it is handed the
-- lock; the owner token is hex digits, the info starts with '{'); one of
-- another protocol is woken (registration_parts in common.lua). A
-- hand-over sets the lock to the
-- waiter's owner token for its TTL, or for what its registration has left
-- if that is shorter (a waiter that died after its last renewal holds the
-- lock up no longer than it would have held its place), mints its fencing
-- token and publishes 'id:attempt:fence:px' on the channel of the waiter's
-- client alone, the lock's channel followed by ':client': the waiter holds
-- the lock without another round trip, and no other client is disturbed.
-- Expired registrations are dropped on the way. A waiters key
-- dlock did not write (see poppable in foreign.lua) is left as it is
-- and hands to nobody, rather than failing the release.

-- The parts of a Mutex waiter's registration: its client's tag, waiter id,
-- attempt, TTL, owner token and holder info ('' none); nil for the id when
-- the registration is of another form, or another protocol.
local function mutex_registration(waiter)
  local client, rest, ours = registration_parts(waiter)
  if client == nil or not ours then
    return nil
  end
  local id, after = registered_id(rest)
  if id == nil then
    return client
  end
  local attempt, ttl, owner, info = string.match(after, '^:(%d+):(%d+):(%x+)(.*)$')
  if attempt == nil then
    return client
  end
  return client, id, attempt, ttl, owner, info
end

-- hand_next: as this file's header says.
local function hand_next(lock, fence, waiters, channel, publish, holder, with_info)
  if with_info ~= false then
    drop_holder_info(holder)
  end
  local waiter, left
  if poppable(waiters) then
    waiter, left = pop_live(waiters)
  end
  if waiter == nil then
    redis.call('DEL', lock)
    return
  end
  local client, id, attempt, ttl, owner, info = mutex_registration(waiter)
  if id == nil then -- a waiter that takes no hand-over: freed, and woken
    redis.call('DEL', lock)
    wake_waiter(channel, waiter, publish)
    return
  end
  -- Its other registrations go with it: a late copy of an earlier attempt
  -- may have registered it again (withdraw_waiter in common.lua), and the
  -- next release would hand the lock to it once more. Every hand-over
  -- looks: no attempt number tells a copy (one may land late with no
  -- read timeout seen, or come from an older client).
  withdraw_waiter(waiters, waiter)
  local token = mint_token(fence, ttl)
  if type(token) ~= 'number' then -- a foreign fencing counter: wake the waiter instead
    redis.call('DEL', lock)
    redis.call(publish, channel .. ':' .. client, id)
    return
  end
  local px = math.floor(math.min(tonumber(ttl), left))
  give_lock(lock, holder, owner, info, px)
  redis.call(publish, channel .. ':' .. client, handover_message(id, attempt, token, px))
end
