-- Acquire a permit of a Semaphore.
--
-- KEYS     SemLayout (sem.go), then TOMBSTONE: as in sem_lib.lua
-- ARGV     in the order of SemAcquireArgs (sem.go), by these names:
-- OWNER    owner token of the call (random, unique per call); every attempt
--          of the call sends the same
-- HOLD_TTL TTL in milliseconds
-- WAITER   waiter id to register when refused; '' for an attempt that will
--          not wait for a wake-up
-- WAITER_TTL how long a registration lasts, in milliseconds
-- EXPECTED the number of permits the caller expects
-- INFO     the holder's info (JSON), kept with its permit (sem_lib.lua);
--          '' or absent: none
--
-- Returns {1, fence}  acquired; fence is the new fencing token
--         {0, ms}     all permits held; ms until the first of them expires
--         {-1, 0}     this attempt was abandoned by its client: do nothing
--         {-2, n}     the semaphore has n permits, not EXPECTED: nothing done
-- Fails with WRONGTYPE, changing nothing, when a key of the semaphore holds
-- what dlock did not write (see foreign.lua; the permits key: something not
-- a number).
--
-- Safe to send twice: a resend finds its permit and reports its token,
-- registering nothing (withdrawing the call's registration), the permit
-- lasting the TTL from now (a copy of an
-- earlier attempt may have taken it while the call slept, told it was
-- refused; the call's lease counts from its latest attempt); so does a copy of an earlier attempt of the call,
-- refused, arriving once a later one was granted.
-- Safe to arrive late: a copy of any attempt of a call that gave up finds
-- the call's tombstone (TOMBSTONE) before it takes a permit or registers, and
-- does neither.

-- Record owner's fencing token, and its holder info if it has any.
local function hold(owner, fence)
  if INFO and INFO ~= '' then
    redis.call('HSET', TOKENS, owner, fence, 'i' .. owner, INFO)
  else
    redis.call('HSET', TOKENS, owner, fence)
  end
end

local owner = OWNER
local wrong = rights_refused(FENCE)
if wrong then
  return wrong
end
-- Where nobody holds a permit or waits, no number of permits is kept
-- (the last release took it) and the call has no tombstone (one EXISTS),
-- only the counter needs a look: a permit is free, and the keys beside
-- are made here.
local quiet = redis.call('EXISTS', HOLDERS, TOKENS, WAITERS, TOMBSTONE, PERMITS) == 0
-- The quiet grant makes the holders' keys, then gives them their expiry:
-- a refusal between would leave them with none (see refused_any).
wrong = quiet and refused_any(HOLDERS, {'hset', 'pexpire'})
  or foreign_fence(FENCE) or not quiet and (foreign_key({}, {WAITERS}, {}) or foreign_semaphore(HOLDERS, TOKENS))
if wrong then
  return wrong
end
local now = server_now()
-- Read every key before writing any, so a foreign one fails the script
-- with nothing changed.
local stored, foreign
if not quiet then
  stored, foreign = call_on(PERMITS, 'GET', PERMITS)
  if foreign then
    return foreign
  end
end
local permits = tonumber(stored)
if stored and not permits then
  return not_dlocks(PERMITS, 'a string')
end
if not quiet then
  purge(now)
end
if permits == nil then
  redis.call('SET', PERMITS, EXPECTED, 'PX', HOLD_TTL) -- a grant keeps it with its permit (expire_with_last)
elseif permits ~= tonumber(EXPECTED) then
  return {-2, permits}
end
if quiet then
  -- Numbers in digits: each number given to redis.call is formatted anew.
  local fence, digits = mint_token(FENCE, HOLD_TTL)
  redis.call('ZADD', HOLDERS, string.format('%d', now + tonumber(HOLD_TTL)), owner)
  hold(owner, digits)
  -- The only permit: the holders' keys, and the number, last as long.
  redis.call('PEXPIRE', HOLDERS, HOLD_TTL)
  redis.call('PEXPIRE', TOKENS, HOLD_TTL)
  return {1, fence}
end
permits = permits or tonumber(EXPECTED)
if live_score(HOLDERS, owner, now) then
  -- The call's own permit, maybe taken by a copy of an attempt the caller
  -- was told was refused: it lasts the TTL from now, whence the caller's
  -- lease counts (never shorter).
  extend_score(HOLDERS, owner, now + tonumber(HOLD_TTL), false)
  expire_with_last(now)
  if WAITER ~= '' then -- registered while that copy took it: no longer waiting
    call_or_wrongtype('ZREM', WAITERS, WAITER)
  end
  return {1, tonumber(redis.call('HGET', TOKENS, owner))}
end
if redis.call('ZCARD', HOLDERS) < permits then
  if redis.call('EXISTS', TOMBSTONE) == 1 then
    return {-1, 0}
  end
  local fence = mint_token(FENCE, HOLD_TTL)
  if type(fence) == 'table' and fence.err then
    return fence
  end
  redis.call('ZADD', HOLDERS, now + tonumber(HOLD_TTL), owner)
  hold(owner, fence)
  expire_with_last(now)
  if WAITER ~= '' then
    call_or_wrongtype('ZREM', WAITERS, WAITER)
  end
  return {1, fence}
end
if WAITER ~= '' then
  if redis.call('EXISTS', TOMBSTONE) == 1 then
    return {-1, 0}
  end
  register_waiter(WAITERS, WAITER, WAITER_TTL, now)
end
local first = redis.call('ZRANGE', HOLDERS, '0', '0', 'WITHSCORES')
return {0, tonumber(first[2]) - now}
