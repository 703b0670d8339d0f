-- Drops the in-flight claim on an Idempotency-Key so the client may retry;
-- a stored response or another payload's claim is left alone.
-- KEYS[1] key; ARGV[1] payload hash.
local f = redis.call('HMGET', KEYS[1], 'hash', 'state')
if f[1] == ARGV[1] and f[2] == 'in_flight' then
  return redis.call('DEL', KEYS[1])
end
return 0
