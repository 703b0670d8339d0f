-- Take a semaphore permit if one is free (no queue).
--
-- KEYS: permits, fence
-- ARGV: id, max, lease_ms, then the fence's seen, hold_ms (fence.lua)
-- Reply: {granted (1|0), permits_in_use, fenced (1|0)}
local permits, id = KEYS[1], ARGV[1]
local max, lease_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', permits, '-inf', '(' .. now)
local in_use = redis.call('ZCARD', permits)
if redis.call('ZSCORE', permits, id) then
  return {1, in_use, 0}
end
-- Fence: after a failover, nothing is granted until the holders re-asserted.
if fence_held(now) then
  return {0, in_use, 1}
end
if in_use < max then
  redis.call('ZADD', permits, now + lease_ms, id)
  return {1, in_use + 1, 0}
end
return {0, in_use, 0}
