-- wake_next(waiters, channel, publish): wake the next live waiter of a lock.
-- Prepended to the Semaphore scripts that free one (see scripts.go; an
-- Election's release takes its steps, making the channel only then); a
-- Mutex's are handed over instead (hand_next.lua).
--
-- waiters  sorted set: member = waiter id ('client/id': see wake_waiter in
--          common.lua), score = when its registration
--          expires, in ms of the server's clock (waiters refresh it while
--          they wait, so a dead waiter's entry runs out by itself)
-- channel  the lock's wake-up channel
-- publish  'PUBLISH', or 'SPUBLISH' on a Redis 7 cluster
--
-- Pops expired entries until it finds a live one and publishes its id: one
-- release, one attempt, whichever client the waiter is in. A waiters key
-- dlock did not write (see poppable in foreign.lua) is left as it is
-- and wakes nobody, rather than failing the release.
local function wake_next(waiters, channel, publish)
  if not poppable(waiters) then
    return
  end
  local waiter = pop_live(waiters)
  if waiter ~= nil then
    wake_waiter(channel, waiter, publish)
  end
end
