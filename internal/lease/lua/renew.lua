-- Extends a lease only while it still holds our token: after an expiry
-- another owner may hold the key, and extending it would give it two owners.
-- KEYS[1] lease key; ARGV[1] owner token; ARGV[2] ttl in ms.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
