-- The state of a Semaphore. Prepended to the Semaphore scripts (see
-- sem.go). They take the same KEYS, as many as they use, in the order of
-- SemLayout (sem.go), which names them so in Lua (an acquire skips
-- CHANNEL); then the call's and the hold's own, as each script says. All
-- are in the semaphore name's slot:
--
-- HOLDERS  holders: sorted set, one member per permit held (the owner token
--          of its Lease), scored by when it expires in ms of the server's
--          clock. Each permit expires on its own, so a crashed holder's
--          permit comes back within its TTL while the others renew theirs.
-- TOKENS   tokens: hash of each holder's fencing token, for a resent acquire,
--          and, under 'i' .. the holder's owner token, its holder info
--          (WithHolderInfo in Go), gone with its permit
-- PERMITS  permits: the number of permits, a string set by the first
--          acquire (or by SetPermits) so that every client agrees; it
--          expires with the holders and goes with the last one's release,
--          so a name used once leaves nothing
-- WAITERS  waiters: sorted set of waiter ids by registration expiry
-- CHANNEL  wake-up channel (a waiter id is published; '*' wakes all)
-- FENCE    fencing counter (see mint_token in common.lua; acquire; SetPermits
--          only checks it is dlock's)
-- TOMBSTONE the tombstone of this call (acquire and abandon only)

-- Give back the permits whose holders stopped renewing.
local function purge(now)
  drop_expired(HOLDERS, now, function(owner) redis.call('HDEL', TOKENS, owner, 'i' .. owner) end)
end

-- The error for a renewal of a live permit when the tokens are not as
-- dlock left them, or nil: they hold what dlock did not write there (see
-- dlocks_beside: a hash without a TTL is another program's), or they are
-- gone (eviction, a DEL) while the holders' set lives, which
-- foreign_semaphore, and so every acquire and describe.lua, counts
-- another program's; a renewal that went on would keep that set alive,
-- refused by them, for as long as it renewed. Two commands.
local function foreign_tokens()
  local mine, what = dlocks_beside(TOKENS, 'hash')
  if what then
    return not_dlocks(TOKENS, what)
  end
  if not mine then
    return foreign_semaphore(HOLDERS, TOKENS)
  end
  return nil
end

-- The holders' keys, and the number of permits, live as long as the last
-- permit, and no longer.
local function expire_with_last(now)
  local last = redis.call('ZRANGE', HOLDERS, '-1', '-1', 'WITHSCORES')
  if #last == 0 then
    return
  end
  local left = math.max(tonumber(last[2]) - now, 1)
  redis.call('PEXPIRE', HOLDERS, left)
  redis.call('PEXPIRE', TOKENS, left)
  redis.call('PEXPIRE', PERMITS, left)
end

-- Whether a permit is free for the next waiter.
local function permit_free()
  local n = tonumber(redis.call('GET', PERMITS)) or 0
  return redis.call('ZCARD', HOLDERS) < n
end

-- An acquire's grant to the call that registered waiter ('' none), the
-- waiters' PTTL read (waiters_ttl): withdraw its registration (ZREM's
-- WRONGTYPE tells waiters of another type), or, where it registered none,
-- ask the waiters' TYPE: a grant never goes on past waiters dlock did not
-- write. Returns the error to return, or nil.
local function leave_line(waiter, waiters_ttl)
  if waiters_ttl == -2 then
    return nil
  end
  if waiter == '' then
    return waiters_wrong(WAITERS, waiters_ttl)
  end
  local _, wrong = call_on(WAITERS, 'ZREM', WAITERS, waiter)
  return wrong
end

-- The number of permits, expected, kept for ttl ms where an acquire found
-- none stored.
local function keep_permits(stored, expected, ttl)
  if not stored then
    redis.call('SET', PERMITS, expected, 'PX', ttl)
  end
end

-- Record owner's fencing token (its digits), and its holder info (INFO,
-- the acquire's) if it has any: the tokens' first touch on a grant, whose
-- WRONGTYPE tells a key of another type. Returns the error to return, or
-- nil.
local function hold(owner, digits)
  local _, wrong
  if INFO and INFO ~= '' then
    _, wrong = call_on(TOKENS, 'HSET', TOKENS, owner, digits, 'i' .. owner, INFO)
  else
    _, wrong = call_on(TOKENS, 'HSET', TOKENS, owner, digits)
  end
  return wrong
end

-- What a grant that makes the holders' keys writes before their expiry
-- (see refused_any): one table for every call.
local GRANT_RIGHTS = {'hset', 'pexpire'}
