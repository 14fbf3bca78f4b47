-- Give back a permit of a Semaphore and wake the next waiter.
--
-- KEYS     SemLayout (sem.go) up to FENCE, as in sem_lib.lua, then:
-- RELEASE_MARK  this permit's release mark (see mark_released in common.lua),
--               in place of the fencing counter, which a release does not touch
-- TOMBSTONE     the call's tombstone, from a release that gives the call up
--               (see void_call in common.lua); absent otherwise
-- ARGV     in the order of ReleaseArgs (args.go), by these names:
-- OWNER    owner token
-- PUBLISH  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- TOKEN    the permit's fencing token, when given
--
-- Returns 1 released (by this copy, or by an earlier copy of the same
-- release: the mark), 0 not held by this owner (expired, or never taken).
-- A permit taken anew since its grant (under another token: its grant's
-- late copy took it again once it lapsed, maybe after others took every
-- permit) is released all the same, and answers 0, leaving no mark,
-- unless a copy of this release let go first (its mark): then the permit
-- lasted until that copy.
-- A value another program wrote over the tokens is left as it is: the
-- permit's fields are removed only from a hash, where they can only be
-- dlock's (the owner token is secret), at no command more.
--
-- The last permit's release deletes the number of permits: the next handle
-- may bring another. Where the tokens keep its field, its one DEL takes
-- them too (with tokens of permits removed by force, if any: nobody holds
-- those).
--
-- Safe to send twice: the second finds no permit of this owner, and finds
-- the first one's mark, and reports the release.

void_call(TOMBSTONE, VOID_TTL)
local now = server_now()
local owner = OWNER
-- The two permits that expire first: the releaser's alone there is the
-- last permit, whose score comes with it (else one ZSCORE more).
local first = redis.call('ZRANGE', HOLDERS, '0', '1', 'WITHSCORES')
local last = #first == 2 and first[1] == owner
local score
if first[1] == owner or first[3] == owner then
  score = (first[1] == owner and first[2] or first[4]) + 0 -- arithmetic: one strtod, tonumber's two
else
  score = tonumber(redis.call('ZSCORE', HOLDERS, owner))
end
if score == nil then
  return nothing_released(RELEASE_MARK)
end
local held = score > now
local current -- the permit's token, read where it is held
if held then -- not when taken anew (minted_anew); another program's value is no number, and tells nothing
  current = call_or_wrongtype('HGET', TOKENS, owner)
  held = not minted_anew(current, TOKEN, RELEASE_MARK)
end
if last and type(current) == 'string' then
  -- The last permit, and tokens that keep its field (the owner token is
  -- secret): dlock's, and nobody else's token is live. They go with the
  -- holders and the number of permits (not a TTL later), in one command.
  redis.call('DEL', HOLDERS, PERMITS, TOKENS)
else
  if last then
    redis.call('DEL', HOLDERS, PERMITS)
  else
    redis.call('ZREM', HOLDERS, owner)
  end
  call_or_wrongtype('HDEL', TOKENS, owner, 'i' .. owner) -- WRONGTYPE on another program's value: nothing to remove
end
wake_next(WAITERS, CHANNEL, PUBLISH)
if held then
  mark_released(RELEASE_MARK, MARK_TTL)
  return 1
end
return 0
