-- What election_acquire.lua calls, defined once per library load: a local
-- function in a script's body is a new closure at every call (see
-- library.go). Its KEYS and ARGV are the script's (see its header).

-- The lock just taken (LOCK set to OWNER), its term minted (term, and text
-- its digits: mint_token's, or its error reply, which fails the script):
-- record the leadership, withdraw the campaign's registration and tell
-- the observers. The term alone is the reply (see scripts.AcquireReply).
local function lead(term, text)
  raise_error(term)
  redis.call('HSET', LEADER, 'owner', OWNER, 'term', text, 'value', VALUE)
  if WAITER ~= '' then
    call_or_wrongtype('ZREM', WAITERS, WAITER)
  end
  local channel = LEADER -- the observers': the hash's name
  redis.call(PUBLISH, channel, text .. ':' .. VALUE)
  return term
end
