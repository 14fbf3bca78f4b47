-- Release a MultiLock group and hand each lock to its next waiter.
--
-- KEYS     MultiPartLayout (layout.go) key by key: see multi_lib.lua; then
--          RELEASE_MARK, this owner's release mark (see mark_released in
--          common.lua); then, from a release that gives the call up,
--          TOMBSTONE, the call's (see void_call in common.lua)
-- ARGV     in the order of MultiReleaseArgs (args.go), by these names:
-- OWNER    owner token
-- PUBLISH  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- TOKENS_AT the index of the first of the fencing tokens the lease holds,
--          one per lock, when given
--
-- Returns 1 when every lock was held by this owner since its grant and is
-- released (by this copy, or by an earlier copy of the same release: the
-- mark); 0 when some were not (expired, or taken): those still held are
-- released all the same.
--
-- A lock held by this owner but taken anew since the grant (taken_since in
-- common.lua) is released, and counts as not held, unless it was taken
-- after this release's mark (a resend's: the group lasted until the first
-- copy let go).
--
-- Safe to send twice, and to arrive late: a copy finds no lock of this
-- owner's, and touches nothing; it finds the first one's mark, and reports
-- the release.

void_call(TOMBSTONE, VOID_TTL)
-- The locks and their counters in one MGET. Where every lock is the
-- owner's, its counter holds the hold's token (nothing minted since: see
-- taken_since) and nobody waits (one EXISTS), the locks go in one DEL. A
-- group too large for one MGET (FAST_PARTS) is read lock by lock.
local values = N <= FAST_PARTS and redis.call('MGET', unpack(KEYS, LOCK_FROM, FENCE_TO)) or {}
local intact = true
for i = 1, N do
  if values[i] ~= OWNER or values[N + i] ~= ARGV[TOKENS_AT + i - 1] then
    intact = false
    break
  end
end
local waiting -- the waiters' EXISTS, where asked
if intact then
  waiting = redis.call('EXISTS', unpack(KEYS, WAITERS_FROM, WAITERS_TO))
  if waiting == 0 then
    redis.call('DEL', unpack(KEYS, LOCK_FROM, LOCK_TO))
    mark_released(RELEASE_MARK, MARK_TTL)
    return 1
  end
end
-- Else each lock is looked at. The counters read go to counter_reads, for
-- taken_since. MGET reads a key of another type as missing: a lock read
-- so is read again by GET, which fails on it as before, changing nothing.
-- Where nobody waits for any lock (one EXISTS), the locks held go in one
-- DEL; else each is handed on.
local held, waiters = {}, {}
for i = 1, N do
  local lock, fence, lock_waiters = part(i)
  waiters[i] = lock_waiters
  if (values[i] or redis.call('GET', lock)) == OWNER then
    held[#held + 1] = i
  end
  if values[N + i] then
    counter_reads[fence] = values[N + i]
  end
end
local anyone_waits = #held > 0 and (waiting or redis.call('EXISTS', unpack(waiters))) > 0
local released, retaken, freed = #held, false, {}
for _, i in ipairs(held) do
  local lock, fence, lock_waiters, channel = part(i)
  retaken = retaken or taken_since(fence, ARGV[TOKENS_AT + i - 1], RELEASE_MARK)
  if anyone_waits then
    hand_next(lock, fence, lock_waiters, channel, PUBLISH)
  else
    freed[#freed + 1] = lock
  end
end
if #freed > 0 then
  redis.call('DEL', unpack(freed))
end
if released == N and not retaken then
  mark_released(RELEASE_MARK, MARK_TTL)
  return 1
end
if released == 0 and released_before(RELEASE_MARK) then
  return 1
end
return 0
