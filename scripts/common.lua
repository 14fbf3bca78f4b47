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
