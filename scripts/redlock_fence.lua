-- Raise a Redlock node's fencing counter to the token a quorum agreed on.
--
-- KEYS[1]  fencing counter, no TTL
-- ARGV[1]  the token: the highest counter among the nodes that granted
--
-- Returns 1. Never lowers the counter.
--
-- The next quorum shares a node with this one, whose counter is then at
-- least this token, so its own highest counter is above it: tokens keep
-- increasing across holders although each node counts on its own.

local token = tonumber(ARGV[1])
if (tonumber(redis.call('GET', KEYS[1])) or 0) < token then
  redis.call('SET', KEYS[1], token)
end
return 1
