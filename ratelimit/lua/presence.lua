-- Record that a limiter instance is alive, with how many permits it has in
-- flight, so that while Redis is away each instance takes its share of the
-- permits (the local policy) instead of all of them, less what the other
-- instances held beyond their own shares when Redis was last seen.
--
-- KEYS: instances (ZSET id -> expiry ms), inflight (HASH id -> permits in flight)
-- ARGV: id, ttl_ms, in_flight, max
-- Reply: {live instances, this instance's 0-based rank by id,
--         permits the other live instances hold beyond their shares}
local instances, inflight = KEYS[1], KEYS[2]
local id, ttl, mine, max = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
local gone = redis.call('ZRANGEBYSCORE', instances, '-inf', '(' .. now)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', instances, '-inf', '(' .. now)
  redis.call('HDEL', inflight, unpack(gone))
end
redis.call('ZADD', instances, now + ttl, id)
redis.call('HSET', inflight, id, mine)
redis.call('PEXPIRE', instances, ttl)
redis.call('PEXPIRE', inflight, ttl)
-- Ranked by id, not by expiry, so an instance keeps its rank between beats.
local ids = redis.call('ZRANGE', instances, 0, -1)
table.sort(ids)
local counts = redis.call('HMGET', inflight, unpack(ids))
local k, rank, excess = #ids, 0, 0
for i, m in ipairs(ids) do
  if m == id then
    rank = i - 1
  else
    -- The share of rank i-1, as the instance itself computes it (local.go).
    local share = math.floor(max / k)
    if i - 1 < max % k then
      share = share + 1
    end
    local held = tonumber(counts[i]) or 0
    if held > share then
      excess = excess + held - share
    end
  end
end
return {k, rank, excess}
