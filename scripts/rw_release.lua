-- Release one hold of an RWMutex or ReentrantMutex and wake whoever can go.
--
-- KEYS[1..7] as in rw_lib.lua
-- ARGV[1]  member of the hold (mode .. hold id .. owner)
-- ARGV[2]  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Returns 1 released, 0 not held: expired, or never this member's.
--
-- Safe to send twice: the second finds the member gone and touches nothing,
-- so one Lease's Unlock takes away one hold, never another of its owner's.

local now = server_now()
purge(now)
if not live_score(HOLDS, ARGV[1], now) then
  return 0
end
release_hold(ARGV[1], ARGV[2], now)
return 1
