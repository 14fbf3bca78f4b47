-- Raise a Redlock node's fencing counter to the token a quorum agreed on,
-- and keep it: a Redlock's counters do not expire.
--
-- KEYS     in the order of RedlockFenceLayout (layout.go), by these names:
-- FENCE    fencing counter (see mint_token in common.lua)
-- ARGV     in the order of FenceArgs (args.go), by these names:
-- TOKEN    the token: the highest counter among the nodes that granted
--
-- Returns 1. Never lowers the counter, so a copy, however late, is harmless.
-- Fails with WRONGTYPE, naming the key, when the counter is not dlock's.
--
-- The next quorum shares a node with this one, whose counter is then at
-- least this token, so its own highest counter is above it: tokens keep
-- increasing across holders although each node counts on its own. That
-- holds only while the shared node keeps its counter. A single server's
-- counter may expire (mint_token floors the next token by the server's
-- clock), but the nodes of a Redlock have clocks of their own: the token
-- may come from a node whose clock runs ahead of the others', and once
-- that node is gone, the others, minting from their own clocks, would
-- start below it. So the SET here has no expiry (a mint's retention is
-- dropped too).

-- TOKEN's own digits where it is the higher: formatting a number costs a
-- sprintf.
local last = raise_error(last_token(FENCE))
if last > tonumber(TOKEN) then
  redis.call('SET', FENCE, token_text(last))
else
  redis.call('SET', FENCE, TOKEN)
end
return 1
