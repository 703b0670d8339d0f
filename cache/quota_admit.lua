-- Counts one request on a quota counter and returns {requests, tokens,
-- seeded}. ARGV[1]: the counter's TTL in ms, set when it is created.
local r = redis.call('HINCRBY', KEYS[1], 'requests', 1)
if r == 1 and redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
local t = redis.call('HGET', KEYS[1], 'tokens') or '0'
local s = redis.call('HEXISTS', KEYS[1], 'seeded')
return {r, tonumber(t), s}
