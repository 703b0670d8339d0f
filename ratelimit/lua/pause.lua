-- Extend a pause to at least ARGV[1] ms from now (never shorten it).
--
-- KEYS: pause
-- ARGV: ms
-- Reply: the pause left, in ms
local ms = tonumber(ARGV[1])
local left = redis.call('PTTL', KEYS[1])
if left < ms then
  redis.call('SET', KEYS[1], '1', 'PX', ms)
  return ms
end
return left
