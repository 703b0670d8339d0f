-- Take a semaphore permit if one is free (no queue).
--
-- KEYS: permits
-- ARGV: id, max, lease_ms
-- Reply: {granted (1|0), permits_in_use}
local permits, id = KEYS[1], ARGV[1]
local max, lease_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', permits, '-inf', '(' .. now_ms)
local in_use = redis.call('ZCARD', permits)
if redis.call('ZSCORE', permits, id) then
  return {1, in_use}
end
if in_use < max then
  redis.call('ZADD', permits, now_ms + lease_ms, id)
  return {1, in_use + 1}
end
return {0, in_use}
