-- Describe an RWMutex or ReentrantMutex as it is now, without changing it.
--
-- KEYS     RWLayout (layout.go), as in rw_lib.lua
-- ARGV[1]  owner id of the asking handle
--
-- Returns {write holds, read holds, reading owners, the writer is ARGV[1]
-- (1/0), ARGV[1]'s read holds, ms until the last hold expires (0: none),
-- writers waiting, readers waiting, the write side's fencing token (0: none),
-- the last fencing token minted}, followed by owner, mode, holds, holder
-- info ('' none) and the type that took its latest hold in that mode (its
-- 'aw' field, rw_lib.lua; '' none) for each holder (the writer first).
-- Counted from the live holds, so expired ones not yet purged do not show.
-- Fails with WRONGTYPE when a key holds what dlock did not write (see
-- foreign.lua): that is no holder.
--
-- Reads only: a copy, however late, changes nothing.

local wrong = foreign_state(STATE) or foreign_key({FENCE}, {HOLDS, WWAIT, RWAIT, RPASS}, {})
if wrong then
  return wrong
end
local now = server_now()
local owner = ARGV[1]
local writes, reads, own_reads, writer_is_owner, last = 0, 0, 0, 0, now
local readers = {}
local n_readers = 0
local holders = {} -- owner .. mode -> holds
local order = {}
local live = redis.call('ZRANGEBYSCORE', HOLDS, '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  local mode, holder = parse(live[i])
  local id = mode .. holder
  if not holders[id] then
    holders[id] = 0
    if mode == 'w' then
      table.insert(order, 1, id)
    else
      table.insert(order, id)
    end
  end
  holders[id] = holders[id] + 1
  if mode == 'w' then
    writes = writes + 1
    if holder == owner then
      writer_is_owner = 1
    end
  else
    reads = reads + 1
    if not readers[holder] then
      readers[holder] = true
      n_readers = n_readers + 1
    end
    if holder == owner then
      own_reads = own_reads + 1
    end
  end
  last = math.max(last, tonumber(live[i + 1]))
end
local token = 0
local writer = redis.call('HGET', STATE, 'W')
if writes > 0 and writer then
  token = tonumber(redis.call('HGET', STATE, 'tw' .. writer)) or 0
end
local reply = {writes, reads, n_readers, writer_is_owner, own_reads, last - now,
  live_waiters(WWAIT, now), live_waiters(RWAIT, now), token,
  raise_error(last_token(FENCE))}
for _, id in ipairs(order) do
  table.insert(reply, id:sub(2))
  table.insert(reply, id:sub(1, 1))
  table.insert(reply, holders[id])
  table.insert(reply, redis.call('HGET', STATE, 'i' .. id) or '')
  table.insert(reply, redis.call('HGET', STATE, 'a' .. id) or '')
end
return reply
