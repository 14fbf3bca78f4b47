-- Campaign in an Election: become the leader if nobody leads, with a new
-- term, and tell the observers.
--
-- KEYS     in the order of ElectionAcquireLayout (layout.go), by these names:
-- LOCK     lock key: a string holding the leader's owner token, with a TTL
--          (a Mutex's, so the Mutex's extend and TTL scripts renew it)
-- FENCE    term counter: the fencing counter (see mint_token in common.lua)
-- TOMBSTONE the campaign's tombstone (shared by all its attempts), written by
--          mutex_abandon.lua when the campaign gives up
-- WAITERS  candidates waiting: sorted set of waiter ids by registration expiry
-- LEADER   leader: hash of the current leadership, no TTL: 'owner' (whose
--          it is; valid only while the lock key holds the same), 'term',
--          'value'. Its name is also the observers' channel (OBSERVERS in
--          the other Election scripts): 'term:value' is published there on
--          every change
-- ARGV     in the order of ElectionAcquireArgs (args.go), by these names:
-- VALUE    the candidate's value
-- PUBLISH  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- OWNER    owner token of the campaign; every attempt of it sends the same
-- HOLD_TTL TTL in milliseconds
-- WAITER   waiter id to register when refused; '' for an attempt that will
--          not wait for a wake-up
-- WAITER_TTL how long a registration lasts, in milliseconds
--
-- Returns term       elected
--         {0, pttl}  another leads, for pttl more ms unless renewed
--         {-1, 0}    this attempt was abandoned by its client
-- Fails with WRONGTYPE, changing nothing, when a key holds what dlock did not
-- write (see foreign.lua).
--
-- Safe to send twice: a resend finds itself leading and reports its term,
-- registering nothing (withdrawing the campaign's registration), the lock
-- lasting the TTL from now (a copy of an
-- earlier attempt may have taken it while the campaign slept, told it was
-- refused; the lease counts from the latest attempt); so does a copy of an earlier attempt of the
-- campaign, refused, arriving once a later one was elected.
-- Safe to arrive late: a copy of any attempt of a campaign that gave up
-- finds its tombstone before it leads or registers, and does neither.

local owner = OWNER
-- rights_refused's first test, without a call where the rights are known.
local holder, wrong = nil, ARGV[#ARGV] ~= RIGHTS_KNOWN and rights_refused(LOCK)
-- Where nobody waits, no leader's record is left and the campaign has no
-- tombstone (one EXISTS), the counter's GET and SET NX GET are the only
-- probes: SET NX GET takes a free lock, or tells its holder, or fails
-- with WRONGTYPE, changing nothing.
if not wrong and redis.call('EXISTS', WAITERS, LEADER, TOMBSTONE) == 0 then
  wrong = foreign_fence(FENCE)
  if not wrong then
    holder, wrong = text_call_on(LOCK, 'SET', LOCK, owner, 'NX', 'GET', 'PX', HOLD_TTL)
  end
  if not (wrong or holder) then
    return lead(mint_token(FENCE, HOLD_TTL))
  end
else
  holder, wrong = checked_holder(LOCK, wrong or foreign_key({FENCE}, {WAITERS}, {}) or foreign_leader(LEADER))
end
if wrong then
  return wrong
end
if holder == owner then -- a resend, or a copy of an attempt the caller was told was refused
  keep_at_least(LOCK, HOLD_TTL) -- the caller's lease counts from this attempt
  if WAITER ~= '' then -- registered while a copy took it: no longer waiting
    call_or_wrongtype('ZREM', WAITERS, WAITER)
  end
  return tonumber(redis.call('HGET', LEADER, 'term'))
end
if holder and not is_owner_token(holder) then -- not a leader: nothing to wait for
  return not_dlocks(LOCK, 'a string')
end
if holder then
  if WAITER ~= '' then
    if redis.call('EXISTS', TOMBSTONE) == 1 then
      return {-1, 0}
    end
    register_waiter(WAITERS, WAITER, WAITER_TTL)
  end
  return {0, redis.call('PTTL', LOCK)}
end
if redis.call('EXISTS', TOMBSTONE) == 1 then
  return {-1, 0}
end
-- Raise WRONGTYPE on a foreign key before anything changes.
redis.call('HLEN', LEADER)
local term, text = mint_token(FENCE, HOLD_TTL)
raise_error(term) -- before the lock is taken
redis.call('SET', LOCK, owner, 'PX', HOLD_TTL)
return lead(term, text)
