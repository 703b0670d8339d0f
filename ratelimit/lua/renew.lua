-- Extend a permit's lease, only if it is still held: a permit that expired
-- and was dropped (or lost with Redis' data) must not come back.
--
-- KEYS: permits
-- ARGV: id, lease_ms
local now = now_ms()
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
return 1
