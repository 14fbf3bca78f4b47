-- common.lua starts every script (see scripts.go): the server's clock, the
-- sorted sets scored by expiry in ms of that clock, and waiter
-- registration, which most scripts share.

-- redis.call, but WRONGTYPE (another program's key) comes back as the
-- reply, for the caller to read; any other error, a refusal by an ACL
-- above all, fails the script as redis.call would. A refusal read as a
-- reply would be taken for what it is not, or skip a write the script
-- goes on without (an acquire that skipped its rights check, rights.go).
local function call_or_wrongtype(...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err and not string.find(reply.err, 'WRONGTYPE', 1, true) then
    error(reply)
  end
  return reply
end

-- call_or_wrongtype for a command whose reply is never a number (GET,
-- HMGET): its reply is false, a string, a table or an error reply, so .err
-- tells the error (a string's indexes the string library: nil), with no
-- type(), a C call.
local function text_or_wrongtype(...)
  local reply = redis.pcall(...)
  if reply and reply.err and not string.find(reply.err, 'WRONGTYPE', 1, true) then
    error(reply)
  end
  return reply
end

-- The server's clock, read once per script: every TIME is a command the
-- server runs, and a script is one moment (nothing else runs meanwhile).
-- Values, not a table: a table made per call costs more. clock_text is
-- clock_us in digits, for a token minted from the clock (store_token).
local clock_ms, clock_us, clock_text = nil, nil, nil

-- The zeros that pad TIME's µs to 6 digits, by how many it has.
local US_PADS = {'00000', '0000', '000', '00', '0', ''}

-- The server's clock in ms, and in µs. TIME's digits joined as text are
-- the µs: one strtod (arithmetic on TIME's strings takes two), and the
-- digits a token minted from the clock is stored as (no sprintf).
local function server_now()
  if clock_us == nil then
    local t = redis.call('TIME')
    local us = t[2]
    clock_text = t[1] .. US_PADS[#us] .. us
    clock_us = clock_text + 0
    clock_ms = (clock_us - clock_us % 1000) / 1000
  end
  return clock_ms, clock_us
end

-- When member's entry in zset expires; nil when it is absent or expired.
local function live_score(zset, member, now)
  local score = tonumber(redis.call('ZSCORE', zset, member))
  if score ~= nil and score > now then
    return score
  end
  return nil
end

-- Remove the entries of zset that expired by now, handing each to forget
-- first; returns how many there were.
local function drop_expired(zset, now, forget)
  local dead = redis.call('ZRANGEBYSCORE', zset, '-inf', now)
  for _, member in ipairs(dead) do
    forget(member)
  end
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', zset, '-inf', now)
  end
  return #dead
end

-- Pop the next live registration of a set of waiters (scored by expiry):
-- its member and the ms it had left, or nil when none is left. Expired
-- entries are dropped on the way. The caller has found waiters with a TTL
-- (poppable in foreign.lua): ZPOPMIN tells the rest of dlocks_beside's rule,
-- failing on a key of another type and changing nothing (nobody waits).
local function pop_live(waiters)
  local now
  while true do
    local popped = call_or_wrongtype('ZPOPMIN', waiters)
    if popped.err and not string.find(popped.err, 'WRONGTYPE', 1, true) then
      error(popped) -- as redis.call would: a refused right, say
    end
    if popped.err or #popped == 0 then
      return nil
    end
    if now == nil then -- no clock reading when nobody waits
      now = server_now()
    end
    local left = tonumber(popped[2]) - now
    if left >= 1 then
      return popped[1], left
    end
  end
end

-- A registration is a waiter id alone (no '/' nor ':'), or 'client/rest': the
-- tag of the waiter's client, then what its lock type registers. A tag
-- starts with PROTOCOL_TAG (from Go: 'v' and the protocol version), or is
-- 16 hex digits, as protocol 1 wrote them in registrations of the same
-- forms. registration_parts returns the tag (nil for an id alone), the
-- rest, and whether this protocol reads the rest: one of another protocol
-- is never handed a lock nor published, as what it holds is not known here
-- (it may carry an owner token); its client is woken with '*' instead,
-- which every protocol takes as "try again". What is before the '/' ends
-- with the tag, whose CLIENT_TAG_CHARS characters (from Go) it returns
-- last (nil when shorter): a FairMutex's queue entry has its owner token
-- before them, which is never published.
local function registration_parts(entry)
  local client, rest = string.match(entry, '^([^/:]+)/(.*)$')
  if client == nil then
    return nil, entry, string.match(entry, '^[^:]+$') ~= nil
  end
  local ours = client:sub(1, #PROTOCOL_TAG) == PROTOCOL_TAG or string.match(client, '^%x+$') ~= nil
  local tag
  if #client >= CLIENT_TAG_CHARS then
    tag = client:sub(-CLIENT_TAG_CHARS)
  end
  return client, rest, ours, tag
end

-- The waiter id that starts the rest of a registration (from
-- registration_parts), and what its lock type registers after it ('' for
-- nothing): a Mutex's ':'-separated fields and holder info (hand_next.lua),
-- a FairMutex's holder info, which starts with '{' (fair_lib.lua). nil for
-- a rest that does not start with an id.
local function registered_id(rest)
  return string.match(rest, '^([^:{]+)(.*)$')
end

-- Withdraw from set every registration of the waiter that made
-- registration, and registration itself; how many went. A Mutex's call
-- registers anew at each attempt ('client/id:attempt:...', hand_next.lua),
-- and a late copy of an earlier attempt that lands while the call still
-- waits registers it again beside its latest: left behind when the call
-- leaves the line, it would be handed the lock by a later release, held
-- then for nobody until it ran out. One pass over the waiters, made only
-- as a call that registered leaves the line.
local function withdraw_waiter(set, registration)
  local client, rest = registration_parts(registration)
  local id = client and registered_id(rest)
  if id == nil then
    return redis.call('ZREM', set, registration)
  end
  local prefix = client .. '/' .. id .. ':'
  local withdrawn = 0
  for _, member in ipairs(redis.call('ZRANGE', set, '0', '-1')) do
    if member == registration or member:sub(1, #prefix) == prefix then
      withdrawn = withdrawn + redis.call('ZREM', set, member)
    end
  end
  return withdrawn
end

-- Tell a waiter picked from a set of registrations to try again: one
-- registered as 'client/id' on its client's own channel (the lock's channel
-- followed by ':client'), so that no other client hears it; a bare id on
-- the lock's channel. Nothing else of a registration is published.
local function wake_waiter(channel, waiter, publish)
  local client, rest, ours = registration_parts(waiter)
  if client == nil then
    redis.call(publish, channel, ours and rest or '*')
    return
  end
  local id, after = registered_id(rest)
  redis.call(publish, channel .. ':' .. client, ours and after == '' and id or '*')
end

-- Keep key for at least ms more, never less than it had: a set of waiters
-- must outlive its longest registration, whoever registered last and for
-- however short (waiters in different processes refresh at different
-- rates). A key just made has no expiry (-1) and gets this one. One
-- command where the expiry moves later, the case of a renewal.
local function keep_at_least(key, ms)
  if redis.call('PEXPIRE', key, ms, 'GT') == 0 and redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, ms)
  end
end

-- Whether an extend script's ARGV may shorten the hold: only an explicit
-- Lease.Extend says so. A renewal, or a copy of one, can arrive late (held
-- on the network, resent by go-redis after a read timeout), after an
-- Extend to a longer TTL that the lease now counts on: it must not cut the
-- hold back to its own, shorter TTL.
local function may_shorten(flag)
  return flag == '1'
end

-- Extend key to expire ms from now; unless shorten, only ever later.
local function extend_key(key, ms, shorten)
  if shorten then
    redis.call('PEXPIRE', key, ms)
  else
    keep_at_least(key, ms)
  end
end

-- Extend member's entry in zset (scored by expiry) to expire at score; unless
-- shorten, only ever later. The member must be there.
local function extend_score(zset, member, score, shorten)
  if shorten or score > tonumber(redis.call('ZSCORE', zset, member)) then
    redis.call('ZADD', zset, 'XX', score, member)
  end
end

-- Register waiter in the set of waiters for lease ms from now, read from
-- the clock to the µs when not given: registrations in the same ms then
-- still line up in the order they came, not in their members' order.
-- The set goes once nobody waits. Registrations that ran out (waiters that
-- died) are dropped here: under constant contention the set never expires,
-- and nothing else would take them out.
local function register_waiter(set, waiter, lease, now)
  if now == nil then
    local _, us = server_now()
    now = us / 1000
  end
  drop_expired(set, now, function() end)
  redis.call('ZADD', set, now + tonumber(lease), waiter)
  keep_at_least(set, lease)
end

-- Fencing tokens. A lock name's tokens only go up, even when its counter
-- is lost (evicted, deleted, flushed, or missed by the replica a failover
-- promoted): a token is one above the counter and never below the
-- server's clock in µs, so a counter minted anew starts above every token
-- minted before, unless the clock stepped back past them. Tokens stay
-- below 2^53 (the clock reaches it in the year 2255): exact in a Lua
-- number, and in JSON. The counter expires FENCE_RETENTION_TTLS hold TTLs
-- after its last mint (see scripts.FenceRetentionTTLs, which scripts.go
-- puts before this file), so a name no longer used leaves no key behind.

-- What each counter holds, as this script read it (foreign_key in
-- foreign.lua, last_token) or wrote it (store_token); false: nothing; a
-- number: the token last_token found there, checked. A script reads a
-- counter from Redis once: every write to one goes through store_token,
-- but redlock_fence.lua's, its last command.
local counter_reads = {}

-- What the counter fence holds (see counter_reads), read once.
local function counter_read(fence)
  local stored = counter_reads[fence]
  if stored == nil then
    stored = call_or_wrongtype('GET', fence)
    counter_reads[fence] = stored
  end
  return stored
end

-- The last token minted from the counter fence, 0 when there is none; an
-- error reply (WRONGTYPE, naming the key) when the key holds what dlock did
-- not write there: another type, or a string that is not a token.
local function last_token(fence)
  local stored = counter_read(fence)
  if not stored then
    return 0
  end
  local kind = type(stored)
  if kind == 'number' then -- checked already: a match and a strtod spared
    return stored
  end
  -- Tokens stay below 2^53 (exact in Lua and in JSON): a counter with no
  -- token left below it is no counter of dlock's. Digits made a number
  -- by arithmetic: one strtod (see server_now).
  local last = kind == 'string' and string.match(stored, '^%d+$') and stored + 0
  if not last or last >= 2^53 - 1 then
    return redis.error_reply('WRONGTYPE key ' .. fence .. ' is not a fencing counter')
  end
  counter_reads[fence] = last
  return last
end

-- The value of a lock key, and of also if given, read with the lock's
-- counter fence in one MGET: the counter goes to counter_reads. MGET
-- reads a key of another type as missing, so a counter read so is left
-- for last_token's GET, which tells.
local function read_lock(lock, fence, also)
  local values
  if also then
    values = redis.call('MGET', lock, fence, also)
  else
    values = redis.call('MGET', lock, fence)
  end
  if values[2] then
    counter_reads[fence] = values[2]
  end
  return values[1], values[3]
end

-- A token in digits: Lua writes a number of more than 14 digits with an
-- exponent when it joins it to a string. '%d' takes a 64-bit integer,
-- exact for a token, and costs half of '%.0f'.
local function token_text(token)
  return string.format('%d', token)
end

-- Set the counter fence to token, for FENCE_RETENTION_TTLS times ttl ms
-- (whole ms): ttl's digits followed by FENCE_RETENTION_ZEROS, as a number
-- turned to text costs a tonumber and a sprintf.
local function store_token(fence, token, ttl)
  local text = token == clock_us and clock_text or token_text(token)
  counter_reads[fence] = text
  redis.call('SET', fence, text, 'PX', ttl .. FENCE_RETENTION_ZEROS)
end

-- The token the next mint from the counter fence makes, written nowhere
-- yet (store_token writes it), or last_token's error reply. last: as
-- mint_token's.
local function next_token(fence, last)
  last = last or last_token(fence)
  if type(last) ~= 'number' then
    return last
  end
  local _, now_us = server_now()
  if last >= now_us then
    return last + 1
  end
  return now_us
end

-- Mint the next token from the counter fence, for a hold of ttl ms: the
-- token and its digits (store_token's, for a caller that writes it: a
-- number given to redis.call is formatted anew), or last_token's error
-- reply with nothing changed. last: the counter's last_token, when the
-- caller has read it since it last wrote.
local function mint_token(fence, ttl, last)
  local token = next_token(fence, last)
  if type(token) ~= 'number' then
    return token
  end
  store_token(fence, token, ttl)
  return token, counter_reads[fence]
end

-- The token of a hold of ttl ms found already the caller's (a resend, or a
-- hand-over the caller has not heard of): the counter's, as nobody else
-- mints while it is held, or a new one when the counter has expired.
local function held_token(fence, ttl)
  local last = last_token(fence)
  if last == 0 then
    return mint_token(fence, ttl)
  end
  return last
end

-- What every token minted from now on will exceed: the last token, or
-- when the counter is gone, the clock in µs less one.
local function token_floor(fence)
  local last = last_token(fence)
  if last == 0 then
    local _, now_us = server_now()
    return now_us - 1
  end
  return last
end

-- reply, or, when it is an error reply, fail the script with it as
-- redis.call would.
local function raise_error(reply)
  if type(reply) == 'table' and reply.err then
    error(reply)
  end
  return reply
end

-- A release that let go of a hold leaves a mark (a key named by a hash of
-- the owner token) for ms: a copy of the same release sent again after its
-- reply was lost (go-redis resends after a read timeout) finds nothing left
-- to release, but finds the mark, and so reports the release done rather
-- than not held. The client bounds its wait for the release's reply by the
-- mark's lifetime, so any copy whose reply it reads finds the mark. A caller
-- that names no mark (a Redlock's release) gets neither.
local function mark_released(mark, ms)
  if mark ~= nil and ms ~= nil then
    redis.call('SET', mark, '1', 'PX', ms)
  end
end

-- Whether a release of this owner let go already (see mark_released).
local function released_before(mark)
  return mark ~= nil and redis.call('EXISTS', mark) == 1
end

-- Whether an exclusive lock held by the releasing owner was taken anew since
-- the grant of the hold whose token (a release's ARGV, nil when not sent)
-- is given: its counter is above it, and nobody mints while a lock is held.
-- The hold lapsed, maybe another held the lock meanwhile, and a late copy
-- of the attempt that granted it (go-redis's, after a read timeout) took it
-- again for its owner. A counter gone, or foreign, tells nothing. Nor does
-- it once a copy of this release let go (its mark): the hold lasted until
-- then, and the copy took the lock after it; this resend lets that go.
local function taken_since(fence, token, mark)
  if token == nil or token == '' then -- nothing to compare: no read (a Redlock's release)
    return false
  end
  if counter_read(fence) == token then -- nothing minted since: told without a strtod
    return false
  end
  token = tonumber(token)
  if token == nil then
    return false
  end
  local last = last_token(fence)
  return type(last) == 'number' and last > token and not released_before(mark)
end

-- Whether a hold a release found its owner's was taken anew since the
-- grant whose token (a release's ARGV, nil when not sent) is given: the
-- token its record keeps now (current) is another, minted when a late copy
-- of the attempt that granted it (go-redis's, after a read timeout) took
-- it again once it had lapsed, maybe after another held the lock. For a
-- lock whose counter others' grants raise while it is held (readers,
-- permits, re-entries), where taken_since cannot tell. A record gone, or
-- foreign, tells nothing; nor, as for taken_since, does one taken after a
-- copy of this release let go (its mark).
local function minted_anew(current, token, mark)
  if current == token then -- the common case, told without a strtod
    return false
  end
  current, token = tonumber(current), tonumber(token)
  return current ~= nil and token ~= nil and current ~= token and not released_before(mark)
end

-- The answer of a release that found no hold of its owner's: 1 when a
-- copy of it released the hold before (its mark), else 0.
local function nothing_released(mark)
  if released_before(mark) then
    return 1
  end
  return 0
end

-- A release that gives its call up (the caller's context ended as the lock
-- was granted, or a MultiLock rolls back) writes the call's tombstone for
-- ms, as an abandon does: a copy of the granted attempt still on its way
-- then takes nothing. Other releases name none. The write is a release
-- mark's: a key set for ms, when the caller names both.
local void_call = mark_released

-- Holder info (WithHolderInfo in Go) of a Mutex's or FairMutex's hold: a
-- string beside the lock, the holder's owner token followed by the info
-- (JSON, so it starts with '{': HOLDER_INFO), set with the hold's TTL,
-- renewed and removed with it. A key given as nil (a script run for a lock
-- type that keeps none) is left alone; the caller has checked it is not
-- foreign (foreign_holder_info in foreign.lua) before writing it.

-- Store owner's info for ms; nothing for no info.
local function set_holder_info(key, owner, info, ms)
  if key and info and info ~= '' then
    redis.call('SET', key, owner .. info, 'PX', ms)
  end
end

-- The info stored under key for owner, or nil: what is there of another
-- owner, or not dlock's, is not owner's.
local function holder_info_of(key, owner)
  if not key then
    return nil
  end
  local value = call_or_wrongtype('GET', key)
  if type(value) == 'string' and value:sub(1, OWNER_TOKEN_DIGITS) == owner and string.find(value, HOLDER_INFO) then
    return value:sub(OWNER_TOKEN_DIGITS + 1)
  end
  return nil
end

-- Remove the info under key, whoever's it is, if dlock wrote it: the lock
-- it describes is being freed or passed on. A foreign value is left, by
-- the same rule as foreign_holder_info (foreign.lua): dlock's has the form
-- HOLDER_INFO and a TTL.
local function drop_holder_info(key)
  if not key then
    return
  end
  local value = call_or_wrongtype('GET', key)
  if type(value) == 'string' and string.find(value, HOLDER_INFO) and redis.call('PTTL', key) > 0 then
    redis.call('DEL', key)
  end
end

-- Wake every waiter of a lock ('*'): those on the lock's channel, and on the
-- own channel of each client with a registration in waiters (its tag, from
-- registration_parts).
local function wake_all(waiters, channel, publish)
  redis.call(publish, channel, '*')
  local waiting = call_or_wrongtype('ZRANGE', waiters, '0', '-1')
  if waiting.err then
    return
  end
  local told = {}
  for _, entry in ipairs(waiting) do
    local _, _, _, tag = registration_parts(entry)
    if tag ~= nil and not told[tag] then
      told[tag] = true
      redis.call(publish, channel .. ':' .. tag, '*')
    end
  end
end

-- A lock handed to a waiter picked from its registrations (hand_next.lua,
-- fair_lib.lua): lock set to the waiter's owner token for px ms, with the
-- holder info it registered, if any, unless a holder info is there (the
-- releaser's was dropped before: one left is foreign, and stays).
local function give_lock(lock, holder, owner, info, px)
  redis.call('SET', lock, owner, 'PX', px)
  if holder and info and info ~= '' and redis.call('EXISTS', holder) == 0 then
    set_holder_info(holder, owner, info, px)
  end
end

-- What a release publishes to the waiter it handed the lock to, on its
-- client's own channel: 'id:' then 'ref:' when the type sends one (a
-- Mutex: the attempt the hand-over answers), the fencing token minted for
-- it, and the ms the hand-over holds the lock (parseHandOver in Go).
local function handover_message(id, ref, token, px)
  local message = id .. ':'
  if ref ~= nil then
    message = message .. ref .. ':'
  end
  return message .. token_text(token) .. ':' .. px
end

-- rights_refused is an acquire's first step: a NOPERM error, before anything
-- is written, when the user running the script may not run one of
-- SCRIPT_COMMANDS on key (a key of the lock's: its slot, its prefix); else
-- nil. The acquire's last ARGV is RIGHTS_KNOWN once its Client has seen
-- this check pass (rights.go): then nothing is checked, which spares a
-- restricted user about 0.3 µs a command on every acquire. Rights taken
-- away since are found by the command refused; the Client then gives back
-- what the attempt took (its abandon) and checks again at the next. An
-- attempt that registers a waiter never sends RIGHTS_KNOWN.
-- Where the server cannot tell (redis.acl_check_cmd is Redis 7's;
-- miniredis has none), nothing is checked. Nor for a user allowed FLUSHALL
-- and key, such as the default user: one who may wipe every key is taken
-- to be allowed the commands above. always: the script could not give
-- back what it wrote before a command refused (an RWMutex's counts), so
-- it checks on every call.
local function rights_refused(key, always)
  if ARGV[#ARGV] == RIGHTS_KNOWN and not always or redis.acl_check_cmd == nil or (redis.acl_check_cmd('flushall') and redis.acl_check_cmd('del', key)) then
    return nil
  end
  -- Every command the lock type's scripts run on keys, filled in by
  -- scripts.go (withRights; TestScripts_RightsCoverEveryCommand keeps it
  -- whole). Redis does not undo a script's writes when a later command in
  -- it is refused by an ACL: a user missing one right could leave a hold
  -- written and its expiry not, held for good.
  local SCRIPT_COMMANDS = {}
  for _, command in ipairs(SCRIPT_COMMANDS) do
    local allowed -- TIME takes no key; no table per command, a check costs enough
    if command == 'time' then
      allowed = redis.acl_check_cmd(command)
    else
      allowed = redis.acl_check_cmd(command, key)
    end
    if not allowed then
      return redis.error_reply("NOPERM this user has no permissions to run the '" .. command .. "' command")
    end
  end
  return nil
end

-- A NOPERM reply when the user may not run one of commands on key, else
-- nil. For the writes a grant cannot undo once begun: checked even where
-- the rights are known (rights_refused), as they may have been revoked.
local function refused_any(key, commands)
  if redis.acl_check_cmd == nil then
    return nil
  end
  for i = 1, #commands do
    local command = commands[i]
    if not redis.acl_check_cmd(command, key) then
      return redis.error_reply("NOPERM this user has no permissions to run the '" .. command .. "' command")
    end
  end
  return nil
end
