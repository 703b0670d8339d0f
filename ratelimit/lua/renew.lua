-- Extend a permit's lease while it is held.
--
-- A permit that is not held any more comes back only in two cases:
--   - the failover fence holds grants (fence.lua): Redis lost the permit
--     with a failover or a restart, and its holder, still running,
--     re-asserts it before any slot is granted again;
--   - force: a permit of the local policy, granted while Redis was away,
--     is counted in Redis once it answers again, so new grants see it.
-- Otherwise a permit that expired and was dropped (its holder did not reach
-- Redis within a lease) must not come back: its slot may be someone else's.
--
-- KEYS: permits, owners, held, fence
-- ARGV: id, lease_ms, user ('' for a semaphore: no owner bookkeeping),
--       force ('1'|'0'), then the fence's seen, hold_ms
-- Reply: 1 renewed, 2 re-created, 0 lost
local permits, owners, held = KEYS[1], KEYS[2], KEYS[3]
local id, lease_ms, user, force = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local now = now_ms()
local fenced = fence_held(now)
if redis.call('ZSCORE', permits, id) then
  redis.call('ZADD', permits, 'XX', now + lease_ms, id)
  return 1
end
if not fenced and force ~= '1' then
  return 0
end
redis.call('ZADD', permits, now + lease_ms, id)
if user ~= '' and not redis.call('HGET', owners, id) then
  redis.call('HSET', owners, id, user)
  redis.call('HINCRBY', held, user, 1)
end
return 2
