-- Acquire a Mutex: take the lock if it is free and mint a fencing token.
--
-- KEYS     in the order of MutexAcquireLayout (layout.go), by these names:
-- LOCK     lock key: a string holding the owner token, with a TTL
-- FENCE    fencing counter: an integer (see mint_token in common.lua), in the same slot
-- TOMBSTONE this Lock call's tombstone, written by mutex_abandon.lua when the
--          call gives up
-- WAITERS  waiters: sorted set of registrations by expiry (hand_next.lua)
-- ARGV     in the order of MutexAcquireArgs (args.go), by these names:
-- OWNER    owner token of this Lock call (random, unique per call: the lock
--          may be handed to it while it waits)
-- HOLD_TTL TTL in milliseconds
-- WAITER   registration to make when refused, 'id:attempt:ttl:owner' (see
--          hand_next.lua); '' for an attempt that will not wait for a
--          release (TryLock, a first try, no subscription)
-- WAITER_TTL how long a registration lasts, in milliseconds
-- HOLDER   the lock's holder info (see set_holder_info in common.lua)
-- PREVIOUS this call's previous registration, replaced by this attempt's;
--          '' when it had none
-- INFO     this call's holder info (JSON), stored with the hold; '' none.
--          A registration (WAITER) ends with it too, for a hand-over.
--
-- Returns fence       acquired (taken now, or handed over by a release whose
--                     word has not reached the waiter); fence is its token
--         {0, pttl}   held by another owner; pttl is the milliseconds until it
--                     expires (-1: the key has no TTL; -3: not read, as
--                     this call's first registration found others waiting)
--         {-1, 0}     this Lock call was abandoned by its client: do nothing
-- Fails with WRONGTYPE, changing nothing, when a key of the lock it would
-- use holds what dlock did not write (see foreign.lua): a value of another
-- type, a string that is no owner token under the lock key, a waiters set
-- without a TTL; the fencing counter is judged only to mint. Where no probe
-- came first (one PTTL of the waiters), the command that touches a key
-- tells (SET NX GET's, ZADD's, the counter's GET), and a hold just taken
-- is undone: a script is atomic, so nobody sees it. The call's own
-- registrations may be withdrawn by then: dlock's data, of a call that
-- fails.
--
-- A refused waiter is registered in the same step as its refusal, after it
-- subscribed: the release that follows hands the lock to it (or to another
-- live waiter) and tells it, so no release is lost and one release makes one
-- holder. Each attempt registers anew, numbered: a hand-over the waiter hears
-- of is for its latest attempt, and so came after that attempt was sent, or
-- it is stale (that hold ran out before this attempt found the lock not
-- ours) and is ignored.
--
-- Safe to send twice: an owner finding the lock already its own reports the
-- same acquisition, extended to its TTL (never shortened: a copy may land
-- after a longer Extend), mints nothing, and withdraws every registration
-- of the call (a late copy of an earlier attempt took the lock as it waited).
-- Safe to arrive late: a client that gave up on this call left a tombstone,
-- and a copy of any of its attempts that finds it does nothing: it neither
-- takes the lock nor registers (the next release would hand the lock to a
-- caller that has gone), and answers {-1, 0}. The tombstone is read with
-- the lock, in one MGET. The resend path (the lock already this owner's)
-- looks too: a late copy of an earlier attempt may register the call
-- again after its abandon withdrew the registrations it knew of, and the
-- next release hand the lock to that registration; the copy that then
-- finds the lock its own lets it go rather than report it granted to
-- nobody.

-- rights_refused's first test, without a call where the rights are known.
local wrong = ARGV[#ARGV] ~= RIGHTS_KNOWN and rights_refused(LOCK) or (INFO ~= '' and foreign_holder_info(HOLDER))
if wrong then
  return wrong
end
-- The waiters' TTL tells dlock's set (foreign.lua): missing (-2), or with a
-- TTL; the type is learnt from the command that touches it, or, where
-- none does, from TYPE (waiters_wrong).
local waiters_ttl = redis.call('PTTL', WAITERS)
if waiters_ttl == -1 then
  return waiters_wrong(WAITERS, waiters_ttl)
end
-- One MGET reads the holder, the tombstone and the counter (read_lock in
-- common.lua). It reads a key of another type as missing: the lock's is
-- told by SET NX GET, which fails with WRONGTYPE on it, changing nothing.
local holder, void = read_lock(LOCK, FENCE, TOMBSTONE)
if not holder then
  if void then
    return {-1, 0}
  end
  local _, foreign = text_call_on(LOCK, 'SET', LOCK, OWNER, 'NX', 'GET', 'PX', HOLD_TTL)
  if foreign then
    return foreign
  end
  local refused = waiters_wrong(WAITERS, waiters_ttl)
  if refused then
    redis.call('DEL', LOCK)
    return refused
  end
  -- From here an error must not leave the hold behind: pcall, undo, report.
  if PREVIOUS ~= '' and waiters_ttl ~= -2 then
    -- Every registration of the call, a late copy's too (withdraw_waiter).
    local ok, err = pcall(withdraw_waiter, WAITERS, PREVIOUS)
    if not ok then
      redis.call('DEL', LOCK)
      return type(err) == 'table' and err or redis.error_reply(tostring(err))
    end
  end
  -- Its GET finds a counter of another type (an error reply); a refusal
  -- (ACL) raises.
  local ok, fence = pcall(mint_token, FENCE, HOLD_TTL)
  if not ok or type(fence) == 'table' and fence.err then
    redis.call('DEL', LOCK)
    return type(fence) == 'table' and fence or redis.error_reply(tostring(fence))
  end
  set_holder_info(HOLDER, OWNER, INFO, HOLD_TTL)
  return fence
end
if holder == OWNER then
  if void then
    -- Handed to this call after it gave up (a late copy of an earlier
    -- attempt registered it again after its abandon): nobody holds it.
    -- Let it go; waiters find it free at their next try.
    redis.call('DEL', LOCK)
    drop_holder_info(HOLDER)
    return {-1, 0}
  end
  -- Taken by a late copy of an earlier attempt while the call waited:
  -- every registration of the call goes (withdraw_waiter), or the release
  -- would hand the lock to one, held for nobody.
  local registered = PREVIOUS ~= '' and PREVIOUS or WAITER
  if registered ~= '' and waiters_ttl ~= -2 then
    local wrong_waiters = waiters_wrong(WAITERS, waiters_ttl)
    if wrong_waiters then
      return wrong_waiters
    end
    withdraw_waiter(WAITERS, registered)
  end
  local fence = held_token(FENCE, HOLD_TTL)
  if type(fence) == 'table' then -- a counter dlock did not write: before any write but the withdrawal
    return fence
  end
  -- Never shorter: a copy of the attempt that was granted may land after
  -- a longer Extend, which the lease counts on.
  keep_at_least(LOCK, HOLD_TTL)
  set_holder_info(HOLDER, OWNER, INFO, redis.call('PTTL', LOCK))
  return fence
end
if not is_owner_token(holder) then -- not a holder: nothing to wait for
  return not_dlocks(LOCK, 'a string')
end

if WAITER ~= '' then
  if void then
    return {-1, 0}
  end
  local wrong_waiters = enlist(WAITERS, WAITER, WAITER_TTL, waiters_ttl)
  if wrong_waiters then
    return wrong_waiters
  end
  if PREVIOUS ~= '' then -- after the ZADD: the set, never emptied, keeps its TTL
    redis.call('ZREM', WAITERS, PREVIOUS)
  end
end
-- A call's first registration behind others is told no time left (-3):
-- it waits for a hand-over, or its first refresh, which asks. Whoever
-- waits ahead of it tries again as the hold runs out.
if WAITER ~= '' and PREVIOUS == '' and waiters_ttl ~= -2 then
  return {0, -3}
end
return {0, redis.call('PTTL', LOCK)}
