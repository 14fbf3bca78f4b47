-- What election_acquire.lua calls, defined once per library load: a local
-- function in a script's body is a new closure at every call (see
-- library.go). Its KEYS and ARGV are the script's (see its header).

-- last_token's rule (common.lua) on what a GET read of the term counter
-- FENCE (false for nothing, or the GET's WRONGTYPE reply): the last token,
-- 0 when there is none; or nil and last_token's error reply when the
-- counter holds what dlock did not write. Judged here, without its
-- type() checks (see text_or_wrongtype) and its per-call table
-- (counter_reads, made at every call of a script that ships it).
local function counter_value(stored)
  if not stored then
    return 0
  end
  local last = not stored.err and string.find(stored, '^%d+$') and stored + 0
  if last and last < 2^53 - 1 then
    return last
  end
  return nil, redis.error_reply('WRONGTYPE key ' .. FENCE .. ' is not a fencing counter')
end

-- The zeros that pad TIME's µs to 6 digits, by how many digits they have:
-- a lookup, where string.sub would be a C call.
local US_PADS = {'00000', '0000', '000', '00', '0', ''}

-- Mint the term that follows last (counter_value's) by next_token's rule,
-- one above it and never below the clock in µs, and store its digits
-- (store_token's write): the term and its digits. Where the counter is
-- below the clock, the rule's common case, the term's digits are TIME's,
-- joined as text: one strtod, where server_now's arithmetic on TIME's
-- strings takes two and token_text a string.format.
local function elect(last)
  local t = redis.call('TIME')
  local us = t[2]
  local text = t[1] .. US_PADS[#us] .. us
  local term = text + 0
  if last + 1 > term then -- the counter is ahead of the clock
    term = last + 1
    text = token_text(term)
  end
  redis.call('SET', FENCE, text, 'PX', HOLD_TTL .. FENCE_RETENTION_ZEROS)
  return term, text
end

-- The lock just taken (LOCK set to OWNER), its term minted (term, and text
-- its digits): record the leadership, withdraw the campaign's
-- registration and tell the observers.
local function lead(term, text)
  redis.call('HSET', LEADER, 'owner', OWNER, 'term', text, 'value', VALUE)
  if WAITER ~= '' then
    call_or_wrongtype('ZREM', WAITERS, WAITER)
  end
  local channel = LEADER -- the observers': the hash's name
  redis.call(PUBLISH, channel, text .. ':' .. VALUE)
  return {1, term}
end
