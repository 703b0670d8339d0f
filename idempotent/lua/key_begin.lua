-- Claims an Idempotency-Key or reports what holds it, atomically.
-- The hash is a HASH: hash (payload hash), state (in_flight | done), and
-- once done: status, header (JSON), body.
-- KEYS[1] key; ARGV[1] payload hash; ARGV[2] in-flight ttl in ms.
if redis.call('HSETNX', KEYS[1], 'hash', ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], 'state', 'in_flight')
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {'proceed'}
end
local f = redis.call('HMGET', KEYS[1], 'hash', 'state', 'status', 'header', 'body')
-- The payload is compared first: reusing a key for another payload is a
-- client bug whatever the first request's progress.
if f[1] ~= ARGV[1] then
  return {'mismatch'}
end
if f[2] ~= 'done' then
  return {'in_flight'}
end
return {'replay', f[3], f[4], f[5]}
