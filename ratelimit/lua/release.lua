-- Release a permit and wake the waiters. The notification carries Redis
-- TIME (µs) so a waiter can measure handoff latency on the same clock.
--
-- KEYS: permits
-- ARGV: id, notify_channel
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('PUBLISH', ARGV[2], string.format('%.0f', now))
end
return redis.call('ZCARD', KEYS[1])
