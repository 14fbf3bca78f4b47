-- How long a MultiLock group has left: the shortest TTL of its locks.
--
-- KEYS     MultiPartLayout (layout.go) key by key: see multi_lib.lua
-- ARGV     in the order of OwnerArgs (args.go), by these names:
-- OWNER    owner token
--
-- Returns the milliseconds left, or -3 when some lock is not held by owner.
--
-- Reads only: a copy, however late, changes nothing.

if not all_held(OWNER) then
  return -3
end
local least = -1
for i = 1, N do
  local ttl = redis.call('PTTL', (part(i)))
  if least < 0 or (ttl >= 0 and ttl < least) then
    least = ttl
  end
end
return least
