-- Stores the response of the request that owns an Idempotency-Key. The first
-- completed response wins; a key meanwhile claimed for another payload (ours
-- expired) is left alone.
-- KEYS[1] key; ARGV[1] payload hash; ARGV[2] status; ARGV[3] header JSON;
-- ARGV[4] body; ARGV[5] ttl in ms.
local f = redis.call('HMGET', KEYS[1], 'hash', 'state')
if (f[1] and f[1] ~= ARGV[1]) or f[2] == 'done' then
  return 0
end
redis.call('HSET', KEYS[1], 'hash', ARGV[1], 'state', 'done',
  'status', ARGV[2], 'header', ARGV[3], 'body', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
