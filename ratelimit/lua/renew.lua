-- Extend a permit's lease, only if it is still held: a permit that expired
-- and was dropped (or lost with Redis' data) must not come back.
--
-- KEYS: permits
-- ARGV: id, lease_ms
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now_ms + tonumber(ARGV[2]), ARGV[1])
return 1
