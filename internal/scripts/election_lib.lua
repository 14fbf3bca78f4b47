-- What election_acquire.lua calls, defined once per library load: a local
-- function in a script's body is a new closure at every call (see
-- library.go). Its KEYS and ARGV are the script's (see its header).

-- The last token of the term counter FENCE, 0 when there is none, read by
-- one GET; or nil and last_token's error reply when it holds what dlock
-- did not write. A counter of dlock's is judged here by last_token's rule
-- (digits, below 2^53 - 1), without its type() checks (see
-- text_or_wrongtype); anything else is left to last_token, which reads it
-- again and names the key.
local function counter_last()
  local stored = text_or_wrongtype('GET', FENCE)
  if not stored then
    return 0
  end
  local last = not stored.err and string.match(stored, '^%d+$') and stored + 0
  if last and last < 2^53 - 1 then
    return last
  end
  last = last_token(FENCE)
  if type(last) == 'number' then
    return last
  end
  return nil, last
end

-- Mint the term that follows last (counter_last's number) by next_token's
-- rule, one above it and never below the clock in µs, and store it
-- (store_token): the term and its digits. next_token and mint_token would
-- check with type() what is a number here.
local function elect(last)
  local _, now_us = server_now()
  local term = last + 1
  if term < now_us then
    term = now_us
  end
  store_token(FENCE, term, HOLD_TTL)
  return term, counter_reads[FENCE]
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
