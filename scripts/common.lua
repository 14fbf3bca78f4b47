-- common.lua starts every script (see scripts.go): the server's clock, the
-- sorted sets scored by expiry in ms of that clock, and waiter
-- registration, which most scripts share.

-- The server's clock in ms, and in µs.
local function server_now()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.floor(us / 1000), us
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
-- entries are dropped on the way; a waiters key of another type (not
-- dlock's) counts as empty.
local function pop_live(waiters)
  local now
  while true do
    local popped = redis.pcall('ZPOPMIN', waiters)
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

-- Tell a waiter picked from a set of registrations to try again: one
-- registered as 'client/id' on its client's own channel (the lock's channel
-- followed by ':client'), so that no other client hears it; a bare id on
-- the lock's channel.
local function wake_waiter(channel, waiter, publish)
  local client, id = string.match(waiter, '^([^/:]+)/([^:]+)$')
  if client ~= nil then
    redis.call(publish, channel .. ':' .. client, id)
  else
    redis.call(publish, channel, waiter)
  end
end

-- Wake every waiter of a lock ('*'): those on the lock's channel, and on the
-- own channel of each client with a registration in waiters. A client's tag
-- is the 16 characters before the registration's '/' (a FairMutex's has its
-- owner token before them, which is not published).
local function wake_all(waiters, channel, publish)
  redis.call(publish, channel, '*')
  local waiting = redis.pcall('ZRANGE', waiters, 0, -1)
  if waiting.err then
    return
  end
  local told = {}
  for _, entry in ipairs(waiting) do
    local before = string.match(entry, '^([^/:]+)/')
    if before ~= nil and #before >= 16 then
      local client = before:sub(-16)
      if not told[client] then
        told[client] = true
        redis.call(publish, channel .. ':' .. client, '*')
      end
    end
  end
end

-- Register waiter in the set of waiters for lease ms from now, read from
-- the clock to the µs when not given: registrations in the same ms then
-- still line up in the order they came, not in their members' order.
-- The set goes once nobody waits.
local function register_waiter(set, waiter, lease, now)
  if now == nil then
    local _, us = server_now()
    now = us / 1000
  end
  redis.call('ZADD', set, now + tonumber(lease), waiter)
  redis.call('PEXPIRE', set, lease)
end
