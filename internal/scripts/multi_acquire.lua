-- Acquire a MultiLock group: take every lock of it, or none.
--
-- KEYS     MultiPartLayout (layout.go) key by key, then TOMBSTONE: see
--          multi_lib.lua
-- ARGV     in the order of MultiAcquireArgs (args.go), by these names:
-- PUBLISH  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- OWNER    owner token of the call in this group (random, unique per call);
--          every attempt of the call sends the same
-- HOLD_TTL TTL in milliseconds
-- WAITER   waiter id to register when refused; '' for an attempt that will
--          not wait for a wake-up
-- WAITER_TTL how long a registration lasts, in milliseconds
-- WATCH    the lock (1-based) whose channel the waiter listens on
--
-- Returns {1, fence1, ..., fenceN}  acquired all; a fencing token per lock
--         {0, pttl, busy}  lock number busy is held (the first that is);
--                          pttl is the milliseconds until it expires
--         {-1, 0}          this attempt was abandoned by its client
-- Fails with WRONGTYPE, changing nothing, when a key of a lock holds what
-- dlock did not write (see foreign.lua).
--
-- A waiter registers on one lock only, the one it listens on, and only when
-- that is the one in its way. When another lock is in its way now, it
-- leaves the first lock's line (passing on a wake-up it may have taken) and
-- the client listens on the other before trying again: no wake-up is lost
-- and none is wasted on a waiter that cannot use it.
--
-- Safe to send twice: a resend finds the locks its own (every one of them:
-- a lock lost since is free, taken anew with the rest, or another's, which
-- refuses it) and mints nothing,
-- registering nothing (withdrawing the call's registration), the locks
-- lasting the TTL from now (a copy of an
-- earlier attempt may have taken them while the call slept, told it was
-- refused; the lease counts from the latest attempt); so does a copy of an earlier attempt of the call,
-- refused, arriving once a later one was granted.
-- Safe to arrive late: a copy of any attempt of a call that gave up finds
-- the call's tombstone before it takes the locks or registers, and does
-- neither.

local owner, waiter = OWNER, WAITER -- WATCH made a number only where a waiter needs it (two strtod)
-- Once the rights are known, rights_refused checks nothing: not called.
if ARGV[#ARGV] ~= RIGHTS_KNOWN then
  for i = 1, N do
    local _, fence = part(i)
    local wrong = rights_refused(fence)
    if wrong then
      return wrong
    end
  end
end
-- The group is free, nobody waits and the call has no tombstone when none
-- of those keys exists and each counter is missing or a string: MGET reads
-- the counters, and one EXISTS over them and the rest counts the strings
-- MGET found, and more for any other key there (a counter of another type
-- MGET reads as missing). Then only the counters' digits need a look.
local stored = redis.call('MGET', unpack(KEYS, FENCE_FROM, FENCE_TO))
local found = 0
for i = 1, N do
  if stored[i] then
    found = found + 1
  end
end
if N <= FAST_PARTS and redis.call('EXISTS', TOMBSTONE, unpack(KEYS, LOCK_FROM, WAITERS_TO)) == found then
  return take_free(stored, owner, HOLD_TTL)
end
for i = 1, N do -- a counter read is a string: foreign_key asks no GET of it
  if stored[i] then
    counter_reads[select(2, part(i))] = stored[i]
  end
end
local locks, counters = {}, {}
for i = 1, N do
  locks[i], counters[i] = part(i)
end
for i = 1, N do
  local _, fence, waiters = part(i)
  local wrong = foreign_key({fence}, {waiters}, {})
  if wrong then
    return wrong
  end
end
-- Every lock read before any change: a foreign value in one fails the
-- script with nothing changed, and the group is the call's only if every
-- lock is (one may have been lost since: deleted, evicted, removed by
-- force, and maybe taken by another owner).
local busy, mine = 0, 0
for i = 1, N do
  local lock = part(i)
  local holder, foreign = text_call_on(lock, 'GET', lock)
  if foreign then
    return foreign
  end
  if holder and holder ~= owner and not is_owner_token(holder) then
    return not_dlocks(lock, 'a string')
  end
  if holder == owner then
    mine = mine + 1
  elseif holder and busy == 0 then
    busy = i
  end
end
if mine == N then -- a resend: the attempt took them all
  local tokens = {1}
  for j = 1, N do
    tokens[j + 1] = raise_error(held_token(counters[j], HOLD_TTL))
  end
  for j = 1, N do
    -- Maybe a copy of an attempt the caller was told was refused: the
    -- caller's lease counts from this attempt (never shorter).
    keep_at_least(locks[j], HOLD_TTL)
  end
  if waiter ~= '' then -- registered while a copy took them: no longer waiting
    call_or_wrongtype('ZREM', select(3, part(tonumber(WATCH))), waiter)
  end
  return tokens
end
-- Some of the group's locks the call's, not all: those free are taken
-- with the rest anew (below), as from nothing; one held by another owner
-- refuses the attempt, and the call's own run out with their TTL (or go
-- with its abandon).

if busy == 0 then
  if redis.call('EXISTS', TOMBSTONE) == 1 then
    return {-1, 0}
  end
  -- Every counter read first: a foreign value in one fails before any is minted.
  local tokens, lasts = {1}, {}
  for i = 1, N do
    lasts[i] = raise_error(last_token(counters[i]))
  end
  for i = 1, N do
    tokens[i + 1] = mint_token(counters[i], HOLD_TTL, lasts[i])
  end
  for i = 1, N do
    redis.call('SET', locks[i], owner, 'PX', HOLD_TTL)
  end
  if waiter ~= '' then
    call_or_wrongtype('ZREM', select(3, part(tonumber(WATCH))), waiter)
  end
  return tokens
end

if waiter ~= '' then
  local watch = tonumber(WATCH)
  local lock, fence, waiters, channel = part(watch)
  if busy == watch then
    if redis.call('EXISTS', TOMBSTONE) == 1 then
      return {-1, 0}
    end
    register_waiter(waiters, waiter, WAITER_TTL)
  elseif call_or_wrongtype('ZREM', waiters, waiter) == 0 and redis.call('EXISTS', lock) == 0 then
    hand_next(lock, fence, waiters, channel, PUBLISH)
  end
end
return {0, redis.call('PTTL', locks[busy]), busy}
