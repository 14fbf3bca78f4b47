-- Release one hold of an RWMutex or ReentrantMutex and wake whoever can go.
--
-- KEYS     RWLayout (layout.go) up to FENCE, as in rw_lib.lua, then:
-- RELEASE_MARK  this hold's release mark (see mark_released in common.lua),
--               in place of the fencing counter, which a release does not touch
-- TOMBSTONE     the call's tombstone, from a release that gives the call up
--               (see void_call in common.lua); absent otherwise
-- ARGV     in the order of ReleaseArgs (args.go), by these names:
-- OWNER    member of the hold (mode .. hold id .. owner)
-- PUBLISH  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
-- TOKEN    the hold's fencing token, when given
--
-- Returns 1 released (by this copy, or by an earlier copy of the same
-- release: the mark), 0 not held: expired, or never this member's (also
-- where another program wrote over the holds: they are left as they are).
-- A hold taken anew since its grant (retaken below) is released all the
-- same, and answers 0, leaving no mark; one taken anew after this release's
-- mark (a resend's, the hold having lasted until the first copy let go) is
-- released, and answers 1.
-- Fails with WRONGTYPE, changing none of the lock's keys, where another
-- program wrote over the state (foreign.lua). A release that gives its
-- call up has written the call's tombstone by then, on purpose: were the
-- foreign value deleted, a late copy of the grant would find it.
--
-- Safe to send twice: the second finds the member gone and touches nothing,
-- so one Lease's Unlock takes away one hold, never another of its owner's;
-- it finds the first one's mark, and reports the release.

void_call(TOMBSTONE, VOID_TTL)
local now = server_now()
local member = OWNER
-- The first two holds: one command tells the case of a hold alone, the
-- lock's last, and whether any expired (the first did).
local first = redis.call('ZRANGE', HOLDS, '0', '1', 'WITHSCORES')
local score
if first[1] == member or first[3] == member then
  score = first[1] == member and first[2] or first[4]
else
  score = redis.call('ZSCORE', HOLDS, member)
end
if not score or tonumber(score) <= now then
  return nothing_released(RELEASE_MARK)
end
local alone = #first == 2
-- Taken anew since the grant (minted_anew): the token of the owner's holds
-- in the member's mode is another. It is minted only when none of them is
-- held (rw_acquire.lua): while any lasts, it stays, and no other owner can
-- have held against them.
-- One read for the mark (is_dlocks_state) and the token.
local mode, owner = parse(member)
local state = call_or_wrongtype('HMGET', STATE, STATE_MARK, 't' .. mode .. owner)
local present = state[1] == STATE_KIND -- false on an error reply: foreign
local anew = present and minted_anew(state[2], TOKEN, RELEASE_MARK)
if alone and present then
  -- The last hold: the state goes with it, counts and all.
  redis.call('DEL', STATE, HOLDS)
  wake(PUBLISH, now, mode == 'w', false)
else
  local wrong = release_hold(member, PUBLISH, now, present, #first == 0 or tonumber(first[2]) <= now)
  if wrong then
    return wrong
  end
end
if anew then
  return 0
end
mark_released(RELEASE_MARK, MARK_TTL)
return 1
