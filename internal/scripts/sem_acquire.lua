-- Acquire a permit of a Semaphore.
--
-- KEYS     SemLayout (sem.go) but CHANNEL (an acquire publishes nothing),
--          then TOMBSTONE: as in sem_lib.lua
-- ARGV     in the order of SemAcquireArgs (sem.go), by these names:
-- EXPECTED the number of permits the caller expects
-- OWNER    owner token of the call (random, unique per call); every attempt
--          of the call sends the same
-- HOLD_TTL TTL in milliseconds
-- WAITER   waiter id to register when refused; '' for an attempt that will
--          not wait for a wake-up
-- WAITER_TTL how long a registration lasts, in milliseconds
-- INFO     the holder's info (JSON), kept with its permit (sem_lib.lua);
--          '' or absent: none
--
-- Returns fence       acquired; fence is the new fencing token
--         {0, ms}     all permits held; ms until the first of them expires
--         {-1, 0}     this attempt was abandoned by its client: do nothing
--         {-2, n}     the semaphore has n permits, not EXPECTED: nothing done
-- Fails with WRONGTYPE, changing nothing, when a key of the semaphore holds
-- what dlock did not write (see foreign.lua; the permits key: something not
-- a number). Where the semaphore is not quiet (another holds a permit, or
-- waits), no TYPE probe comes first: one EXISTS, the PTTLs of the waiters,
-- holders and tokens (no TTL: not dlock's; holders without tokens: not
-- dlock's), and one MGET of the number of permits, the counter and the
-- tombstone; the command that touches a key then tells its type (the
-- holders' ZRANGEBYSCORE and the tokens' HGET, reads; the waiters'
-- ZADD or ZREM), before anything else is written. The call's own
-- registration may be withdrawn by then: dlock's data, of a call that
-- fails. A grant that touches no waiter asks their TYPE; a refusal that
-- registers nothing writes nothing and reads the waiters' PTTL alone, as a
-- Mutex's refusal.
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

local owner = OWNER
-- rights_refused's first test, without a call where the rights are known.
local wrong = ARGV[#ARGV] ~= RIGHTS_KNOWN and rights_refused(FENCE)
if wrong then
  return wrong
end
-- Where nobody holds a permit or waits, no number of permits is kept
-- (the last release took it) and the call has no tombstone (one EXISTS),
-- only the counter needs a look: a permit is free, and the keys beside
-- are made here.
local present = redis.call('EXISTS', HOLDERS, TOKENS, WAITERS, TOMBSTONE, PERMITS)
if present == 0 then
  -- The quiet grant makes the holders' keys, then gives them their expiry:
  -- a refusal between would leave them with none (see refused_any).
  wrong = refused_any(HOLDERS, GRANT_RIGHTS)
  if wrong then
    return wrong
  end
  local last = last_token(FENCE) -- the counter's error reply where it is not dlock's
  if type(last) ~= 'number' then
    return last
  end
  local now = server_now()
  redis.call('SET', PERMITS, EXPECTED, 'PX', HOLD_TTL) -- a grant keeps it with its permit (expire_with_last)
  -- Numbers in digits: each number given to redis.call is formatted anew.
  local fence, digits = mint_token(FENCE, HOLD_TTL, last)
  redis.call('ZADD', HOLDERS, string.format('%d', now + HOLD_TTL), owner) -- HOLD_TTL's digits: one strtod
  hold(owner, digits)
  -- The only permit: the holders' keys, and the number, last as long.
  redis.call('PEXPIRE', HOLDERS, HOLD_TTL)
  redis.call('PEXPIRE', TOKENS, HOLD_TTL)
  return fence
end

-- Not quiet. The TTLs tell dlock's sets (foreign.lua): missing (-2), or
-- with a TTL, holders never without tokens; the types are learnt from the
-- commands that touch them.
local waiters_ttl = redis.call('PTTL', WAITERS)
local holders_ttl = redis.call('PTTL', HOLDERS)
local tokens_ttl = redis.call('PTTL', TOKENS)
if waiters_ttl == -1 then
  return waiters_wrong(WAITERS, waiters_ttl)
end
if holders_ttl == -1 then
  return beside_wrong(HOLDERS, holders_ttl, 'zset')
end
if tokens_ttl == -1 then
  return beside_wrong(TOKENS, tokens_ttl, 'hash')
end
if holders_ttl >= 0 and tokens_ttl == -2 then
  return not_dlocks(HOLDERS, 'a ' .. redis.call('TYPE', HOLDERS).ok)
end
-- One MGET reads the number of permits, the counter and the tombstone
-- (read_lock in common.lua). It reads a key of another type as missing:
-- when EXISTS counted more keys than the PTTLs and the MGET found, the
-- number of permits' GET tells whether it is one, and else the tombstone
-- is (EXISTS is what tells a tombstone).
local stored, void = read_lock(PERMITS, FENCE, TOMBSTONE)
local found = (stored and 1 or 0) + (void and 1 or 0)
for _, ttl in ipairs({waiters_ttl, holders_ttl, tokens_ttl}) do
  if ttl ~= -2 then
    found = found + 1
  end
end
if present > found then
  if not stored then
    stored, wrong = text_call_on(PERMITS, 'GET', PERMITS)
    if wrong then
      return wrong
    end
  end
  void = true -- the key EXISTS counted beside: a tombstone of another type
end
wrong = foreign_fence(FENCE)
if wrong then
  return wrong
end
local permits = tonumber(stored)
if stored and not permits then
  return not_dlocks(PERMITS, 'a string')
end
if permits and permits ~= tonumber(EXPECTED) then
  return {-2, permits}
end
permits = permits or tonumber(EXPECTED)
local now = server_now()

-- The call's token, if it holds a permit (a resend): the tokens' first
-- touch, a read, tells their type. A token is kept for as long as its
-- permit (but for one removed by force: the holders tell).
local token
if tokens_ttl >= 0 then
  local wrong_tokens
  token, wrong_tokens = text_call_on(TOKENS, 'HGET', TOKENS, owner)
  if wrong_tokens then
    return wrong_tokens
  end
end
-- The permits whose holders stopped renewing: the holders' first touch, a
-- read, tells their type. Where there are any (a holder crashed), TYPE
-- probes the waiters before they are given back.
local held = 0
if holders_ttl >= 0 then
  local dead, wrong_holders = text_call_on(HOLDERS, 'ZRANGEBYSCORE', HOLDERS, '-inf', now)
  if wrong_holders then
    return wrong_holders
  end
  if #dead > 0 then
    wrong = waiters_wrong(WAITERS, waiters_ttl)
    if wrong then
      return wrong
    end
    for _, gone in ipairs(dead) do
      redis.call('HDEL', TOKENS, gone, 'i' .. gone)
    end
    redis.call('ZREMRANGEBYSCORE', HOLDERS, '-inf', now)
  end
end

local hold_ttl = tonumber(HOLD_TTL)
local score = token and holders_ttl >= 0 and live_score(HOLDERS, owner, now)
if score then
  -- The call's own permit, maybe taken by a copy of an attempt the caller
  -- was told was refused: it lasts the TTL from now, whence the caller's
  -- lease counts (never shorter).
  wrong = leave_line(WAITER, waiters_ttl) -- registered while that copy took it: no longer waiting
  if wrong then
    return wrong
  end
  if now + hold_ttl > score then
    redis.call('ZADD', HOLDERS, 'XX', now + hold_ttl, owner)
  end
  keep_permits(stored, EXPECTED, HOLD_TTL)
  expire_with_last(now)
  return tonumber(token)
end
if holders_ttl >= 0 then
  held = redis.call('ZCARD', HOLDERS)
end
if held < permits then
  if void then
    return {-1, 0}
  end
  -- A grant that makes the holders' keys gives them their expiry after:
  -- a refusal between would leave them with none (see refused_any).
  wrong = held == 0 and refused_any(HOLDERS, GRANT_RIGHTS) or leave_line(WAITER, waiters_ttl)
  if wrong then
    return wrong
  end
  local fence = next_token(FENCE) -- checked above: a number
  wrong = hold(owner, token_text(fence))
  if wrong then
    return wrong
  end
  store_token(FENCE, fence, HOLD_TTL)
  redis.call('ZADD', HOLDERS, now + hold_ttl, owner)
  keep_permits(stored, EXPECTED, HOLD_TTL)
  if held == 0 then -- the only permit: the holders' keys, and the number, last as long
    redis.call('PEXPIRE', HOLDERS, HOLD_TTL)
    redis.call('PEXPIRE', TOKENS, HOLD_TTL)
    if stored then
      redis.call('PEXPIRE', PERMITS, HOLD_TTL)
    end
  else
    expire_with_last(now)
  end
  return fence
end
if WAITER ~= '' then
  if void then
    return {-1, 0}
  end
  local wrong_waiters = enlist(WAITERS, WAITER, WAITER_TTL, waiters_ttl) -- see foreign.lua
  if wrong_waiters then
    return wrong_waiters
  end
end
if WAITER == '' and not stored then
  -- The number is about to be stored beside waiters nothing touched: their
  -- type first (a TYPE, only where the number went missing).
  wrong = waiters_wrong(WAITERS, waiters_ttl)
  if wrong then
    return wrong
  end
end
keep_permits(stored, EXPECTED, HOLD_TTL)
local first = redis.call('ZRANGE', HOLDERS, '0', '0', 'WITHSCORES')
return {0, tonumber(first[2]) - now}
