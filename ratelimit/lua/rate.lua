-- Admit one request of a rate limit (GCRA: a sliding window without
-- buckets). The key holds the theoretical arrival time (TAT, ms of Redis
-- TIME): each admitted request moves it on by one emission interval
-- (window / limit). A request is admitted while the TAT stays within one
-- window of now, so at most `limit` requests pass in any window and the
-- sustained rate is limit per window. A refused request changes nothing.
--
-- KEYS: key
-- ARGV: limit, window_ms
-- Reply: {1, 0} admitted; {0, retry_after_ms} refused
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_ms()
local interval = window / limit
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then
  tat = now
end
local next_tat = tat + interval
if next_tat - now > window then
  return {0, math.ceil(next_tat - now - window)}
end
redis.call('SET', KEYS[1], string.format('%.0f', math.ceil(next_tat)), 'PX', math.ceil(next_tat - now))
return {1, 0}
