-- Give up on acquiring a Mutex: after an attempt whose outcome the client
-- does not know (it timed out, was cancelled, or failed on the network), or
-- when a waiter stops waiting.
--
-- KEYS     in the order of MutexAbandonLayout (layout.go), by these names:
-- LOCK     lock key
-- CHANNEL  the lock's wake-up channel
-- TOMBSTONE the Lock call's tombstone (one for all its attempts; an
--          Election's campaign: one for all of the campaign's)
-- WAITERS  waiters: sorted set of registrations by expiry (hand_next.lua)
-- FENCE    fencing counter, for a hand-over's token
-- HOLDER   the lock's holder info (hand_next.lua); absent for an
--          Election's and a Redlock's
-- ARGV     in the order of AbandonArgs (args.go), by these names:
-- OWNER    owner token of the Lock call (of the attempt in doubt, for an
--          Election); '' when it has none to release
-- PUBLISH  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- WAITER   registration to withdraw; '' when not registered
-- ALSO     the one before it, should the last attempt not have replaced it;
--          '' when none
--
-- Returns 1 the call held the lock (taken by an attempt, or handed over by
-- a release) and it is released now, else 0.
--
-- Late copies: a copy of any attempt of the call may still be on its way,
-- whether or not an earlier copy was applied (go-redis resends a command
-- after a read timeout, on another connection), and whether the call is in
-- doubt or just stops waiting. So the tombstone is written whatever this
-- script finds, also when it releases a hold: every acquire script refuses
-- an attempt that finds it before taking the lock or registering, so a late
-- copy neither holds the lock for a caller that has gone nor is handed it
-- by the next release. It lasts VOID_TTL, not the TTL: a copy is sent before
-- its call gives up, and a copy later than that bound leaves what an abandon
-- that never arrived would, a hold that expires with its TTL. A lock handed to a
-- waiter that leaves is passed on, as is a wake-up a release sent to one
-- (a waiter registered by a MultiLock): when no registration of this call
-- is left and the lock is free, the next waiter gets it.
--
-- Safe to send twice: a second copy finds nothing of the call's left to
-- release or withdraw, and writes the tombstone again; at most it wakes (or
-- hands a free lock to) the next live waiter, as a release would.

local released = 0
if OWNER ~= '' and redis.call('GET', LOCK) == OWNER then
  released = 1
end
redis.call('SET', TOMBSTONE, '1', 'PX', VOID_TTL)
local picked = false
if WAITER ~= '' then
  local withdrawn -- none from waiters dlock did not write (dlocks_beside)
  if not dlocks_beside(WAITERS, 'zset') then
    withdrawn = 0
  else
    -- Every registration of the call: a late copy of an earlier attempt
    -- may have registered it again (withdraw_waiter in common.lua).
    withdrawn = withdraw_waiter(WAITERS, WAITER)
    if ALSO ~= '' then
      withdrawn = withdrawn + withdraw_waiter(WAITERS, ALSO)
    end
  end
  picked = withdrawn == 0
end
if released == 1 or (picked and redis.call('EXISTS', LOCK) == 0) then
  hand_next(LOCK, FENCE, WAITERS, CHANNEL, PUBLISH, HOLDER)
end
return released
