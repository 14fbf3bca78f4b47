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
--          'value'
-- OBSERVERS observers' channel: 'term:value' is published on every change
-- ARGV[1]  owner token of the campaign; every attempt of it sends the same
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  waiter id to register when refused; '' for an attempt that will
--          not wait for a wake-up
-- ARGV[4]  how long a registration lasts, in milliseconds
-- ARGV[5]  the candidate's value
-- ARGV[6]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Returns {1, term}  elected
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

-- The lock just taken (LOCK set to ARGV[1], term minted; the leader's
-- record found dlock's or missing): record the leadership, withdraw the
-- campaign's registration and tell the observers.
local function elect(term)
  local text = token_text(term) -- once: a number given to redis.call is formatted again
  redis.call('HSET', LEADER, 'owner', ARGV[1], 'term', text, 'value', ARGV[5])
  if ARGV[3] ~= '' then
    call_or_wrongtype('ZREM', WAITERS, ARGV[3])
  end
  redis.call(ARGV[6], OBSERVERS, text .. ':' .. ARGV[5])
  return {1, term}
end

local owner = ARGV[1]
local holder, wrong = nil, rights_refused(LOCK)
-- Where nobody waits, no leader's record is left and the campaign has no
-- tombstone (one EXISTS), the counter's GET and SET NX GET are the only
-- probes: SET NX GET takes a free lock, or tells its holder, or fails
-- with WRONGTYPE, changing nothing.
if not wrong and redis.call('EXISTS', WAITERS, LEADER, TOMBSTONE) == 0 then
  wrong = foreign_fence(FENCE)
  if not wrong then
    holder, wrong = call_on(LOCK, 'SET', LOCK, owner, 'NX', 'GET', 'PX', ARGV[2])
  end
  if not (wrong or holder) then
    return elect(raise_error(mint_token(FENCE, ARGV[2])))
  end
else
  holder, wrong = checked_holder(LOCK, wrong or foreign_key({FENCE}, {WAITERS}, {}) or foreign_leader(LEADER))
end
if wrong then
  return wrong
end
if holder == owner then -- a resend, or a copy of an attempt the caller was told was refused
  keep_at_least(LOCK, ARGV[2]) -- the caller's lease counts from this attempt
  if ARGV[3] ~= '' then -- registered while a copy took it: no longer waiting
    call_or_wrongtype('ZREM', WAITERS, ARGV[3])
  end
  return {1, tonumber(redis.call('HGET', LEADER, 'term'))}
end
if holder and not is_owner_token(holder) then -- not a leader: nothing to wait for
  return not_dlocks(LOCK, 'a string')
end
if holder then
  if ARGV[3] ~= '' then
    if redis.call('EXISTS', TOMBSTONE) == 1 then
      return {-1, 0}
    end
    register_waiter(WAITERS, ARGV[3], ARGV[4])
  end
  return {0, redis.call('PTTL', LOCK)}
end
if redis.call('EXISTS', TOMBSTONE) == 1 then
  return {-1, 0}
end
-- Raise WRONGTYPE on a foreign key before anything changes.
redis.call('HLEN', LEADER)
local term = raise_error(mint_token(FENCE, ARGV[2]))
redis.call('SET', LOCK, owner, 'PX', ARGV[2])
return elect(term)
