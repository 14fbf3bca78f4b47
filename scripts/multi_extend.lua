-- Renew a MultiLock group: only while this owner holds every lock of it.
--
-- KEYS     four per lock: see multi_lib.lua
-- ARGV[1]  owner token
-- ARGV[2]  TTL in milliseconds
--
-- Returns 1 renewed, 0 some lock is no longer held (the lease is lost):
-- nothing is re-created, nor renewed.

if not all_held(ARGV[1]) then
  return 0
end
for i = 1, N do
  local lock = part(i)
  redis.call('PEXPIRE', lock, ARGV[2])
end
return 1
