-- Acquire a FairMutex: take the lock if it is free and nobody waits ahead,
-- else keep (or take) a place in the queue.
--
-- KEYS     FairLayout (layout.go), then TOMBSTONE: as in fair_lib.lua
-- ARGV     in the order of FairAcquireArgs (args.go), by these names:
-- PUBLISH  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- OWNER    owner token of this Lock call (the same for all its attempts: the
--          lock may be handed to it while it waits)
-- HOLD_TTL TTL in milliseconds
-- WAITER   waiter id to queue under when refused; '' for an attempt that
--          will not wait (TryLock, a first try before subscribing)
-- WAITER_TTL how long a registration lasts, in milliseconds
-- INFO     this call's holder info (JSON), stored with the hold; '' none.
--          WAITER ends with it too, so that a hand-over stores it.
--
-- Returns fence       acquired (taken now, or handed over by a release)
--         {0, pttl}   not this caller's turn; pttl is the milliseconds until
--                     the current hold expires (-1: the key has no TTL)
--         {0, pttl, fence}  the same for a caller that queued: fence is the
--                     fencing counter now (token_floor in common.lua), which a hand-over's token must
--                     exceed to be newer than this attempt
--         {-1, 0}     this Lock call was abandoned by its client: do nothing
-- Fails with WRONGTYPE, changing nothing, when a key holds what dlock did not
-- write (see foreign.lua).
--
-- Safe to send twice: an owner finding the lock already its own reports the
-- same acquisition, extended to its TTL (never shortened: a copy may land
-- after a longer Extend), and mints nothing.
-- Safe to arrive late: a copy of an attempt of a call that gave up finds its
-- tombstone (fair_abandon.lua) before it takes the lock or a place in the
-- queue, and does neither.

local owner = OWNER
local with_info = (INFO or '') ~= ''
-- void: the call's tombstone; the PTTLs of the queue and registrations,
-- where read before they are needed (nil: not read).
local holder, void, queue_ttl, reg_ttl = nil, false, nil, nil
-- rights_refused's first test, without a call where the rights are known.
local wrong = ARGV[#ARGV] ~= RIGHTS_KNOWN and rights_refused(LOCK)
-- Where nobody queues, the call has no tombstone and no holder info is
-- stored (one EXISTS), the counter's GET and SET NX GET are the only
-- probes: SET NX GET takes a free lock, or tells its holder, or fails
-- with WRONGTYPE, changing nothing.
if not wrong and (with_info and redis.call('EXISTS', QUEUE, REG, TOMBSTONE, HOLDER)
  or redis.call('EXISTS', QUEUE, REG, TOMBSTONE)) == 0 then
  wrong = foreign_fence(FENCE)
  if not wrong then
    holder, wrong = text_call_on(LOCK, 'SET', LOCK, owner, 'NX', 'GET', 'PX', HOLD_TTL)
  end
  if not (wrong or holder) then
    return grant('')
  end
  queue_ttl, reg_ttl = -2, -2
elseif not wrong then
  -- One MGET reads the lock, the counter and the call's tombstone.
  holder, void = read_lock(LOCK, FENCE, TOMBSTONE)
  if holder and holder ~= owner and WAITER ~= '' and is_owner_token(holder) then
    -- Another holds it and this attempt queues, the common case under
    -- contention: a PTTL of -1 tells a queue dlock did not write, a
    -- ZADD's WRONGTYPE one of another type.
    queue_ttl, reg_ttl = redis.call('PTTL', QUEUE), redis.call('PTTL', REG)
    wrong = foreign_fence(FENCE) or (with_info and foreign_holder_info(HOLDER))
      or (queue_ttl == -1 and waiters_wrong(QUEUE, queue_ttl))
      or (reg_ttl == -1 and waiters_wrong(REG, reg_ttl))
  else
    -- foreign_key tells the counter's type, foreign_fence its digits.
    holder, wrong = checked_holder(LOCK, foreign_key({FENCE}, {QUEUE, REG}, {})
      or foreign_fence(FENCE) or (with_info and foreign_holder_info(HOLDER)))
  end
end
if wrong then
  return wrong
end
if holder == owner then -- handed over while waiting, or a resend
  -- Never shorter: a copy of the attempt that was granted may land after
  -- a longer Extend, which the lease counts on.
  keep_at_least(LOCK, HOLD_TTL)
  set_holder_info(HOLDER, owner, INFO, redis.call('PTTL', LOCK))
  return raise_error(held_token(FENCE, HOLD_TTL))
end
if holder and not is_owner_token(holder) then -- not a holder: nothing to queue behind
  return not_dlocks(LOCK, 'a string')
end
local entry = ''
if WAITER ~= '' then
  entry = owner .. WAITER
end
if not holder then
  local head = {}
  if redis.call('EXISTS', QUEUE) == 1 then -- else no clock, no purge
    purge_queue(server_now())
    head = redis.call('ZRANGE', QUEUE, '0', '0')
  end
  if #head == 0 or head[1] == entry then
    if void then
      return {-1, 0}
    end
    redis.call('SET', LOCK, owner, 'PX', HOLD_TTL)
    return grant(entry)
  end
  -- Free with someone ahead: the holder expired, or was removed by force,
  -- and nobody handed the lock on. Do it now rather than wait for the head
  -- to find out.
  hand_over(PUBLISH)
end
if entry ~= '' then
  return queue_up(entry, void, queue_ttl or redis.call('PTTL', QUEUE), reg_ttl or redis.call('PTTL', REG))
end
return {0, redis.call('PTTL', LOCK)}
