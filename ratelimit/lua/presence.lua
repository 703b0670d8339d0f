-- Record that a limiter instance is alive and count the live ones, so that
-- while Redis is away each instance takes its share of the permits (the
-- local policy) instead of all of them.
--
-- KEYS: instances (ZSET id -> expiry ms)
-- ARGV: id, ttl_ms
-- Reply: {live instances, this instance's 0-based rank by id, 1 when this
-- call added it (a first start, or back after its entry expired or Redis
-- lost it), else 0}
local instances, id, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', instances, '-inf', '(' .. now)
local added = redis.call('ZADD', instances, now + ttl, id)
redis.call('PEXPIRE', instances, ttl)
-- Ranked by id, not by expiry, so an instance keeps its rank between beats.
local ids = redis.call('ZRANGE', instances, 0, -1)
table.sort(ids)
for i, m in ipairs(ids) do
  if m == id then
    return {#ids, i - 1, added}
  end
end
return {#ids, 0, added}
