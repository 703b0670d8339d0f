-- Read the limiter's state for the admin endpoint.
--
-- KEYS: permits, queue, entry_prefix
-- ARGV: window
-- Reply: {permits_in_use, queue_length, oldest_wait_ms or -1}
local permits, queue, entry_prefix = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms()
local in_use = redis.call('ZCOUNT', permits, now, '+inf')
local oldest = -1
for _, m in ipairs(redis.call('ZRANGE', queue, 0, tonumber(ARGV[1]) - 1)) do
  local enqueued = redis.call('GET', entry_prefix .. m)
  if enqueued then
    oldest = now - tonumber(enqueued)
    break
  end
end
return {in_use, redis.call('ZCARD', queue), oldest}
