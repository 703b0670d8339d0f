-- Adds stored usage (ARGV[1] tokens, ARGV[2] requests) to a counter once:
-- the first caller marks it seeded; later ones add nothing. Returns
-- {requests, tokens}. ARGV[3]: the TTL in ms, should the key be new.
if redis.call('HSETNX', KEYS[1], 'seeded', 1) == 1 then
  redis.call('HINCRBY', KEYS[1], 'tokens', ARGV[1])
  redis.call('HINCRBY', KEYS[1], 'requests', ARGV[2])
  if redis.call('PTTL', KEYS[1]) < 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
end
local v = redis.call('HMGET', KEYS[1], 'requests', 'tokens')
return {tonumber(v[1] or '0'), tonumber(v[2] or '0')}
