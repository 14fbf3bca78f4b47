-- Campaign in an Election: become the leader if nobody leads, with a new
-- term, and tell the observers.
--
-- KEYS[1]  lock key: a string holding the leader's owner token, with a TTL
--          (a Mutex's, so the Mutex's extend and TTL scripts renew it)
-- KEYS[2]  term counter: the fencing counter, no TTL
-- KEYS[3]  this attempt's tombstone, written by mutex_abandon.lua
-- KEYS[4]  candidates waiting: sorted set of waiter ids by registration expiry
-- KEYS[5]  leader: hash of the current leadership, no TTL: 'owner' (whose
--          it is; valid only while the lock key holds the same), 'term',
--          'value'
-- KEYS[6]  observers' channel: 'term:value' is published on every change
-- ARGV[1]  owner token of this attempt
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
-- Fails with WRONGTYPE, changing nothing, when a key holds another type.
--
-- Safe to send twice: a resend finds itself leading and reports its term.

local owner = ARGV[1]
local holder = redis.call('GET', KEYS[1])
if holder == owner then
  return {1, tonumber(redis.call('HGET', KEYS[5], 'term'))}
end
if holder then
  if ARGV[3] ~= '' then
    register_waiter(KEYS[4], ARGV[3], ARGV[4])
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {-1, 0}
end
-- Raise WRONGTYPE on a foreign key before anything changes.
redis.call('HLEN', KEYS[5])
local term = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], owner, 'PX', ARGV[2])
redis.call('HSET', KEYS[5], 'owner', owner, 'term', term, 'value', ARGV[5])
if ARGV[3] ~= '' then
  redis.pcall('ZREM', KEYS[4], ARGV[3])
end
redis.call(ARGV[6], KEYS[6], term .. ':' .. ARGV[5])
return {1, term}
