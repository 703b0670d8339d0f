-- Extend the worker-id lease only while it is still ours: after an expiry
-- another instance may hold the key, and extending it would let two
-- instances issue IDs with the same worker id.
-- KEYS[1] lease key, ARGV[1] our token, ARGV[2] ttl in ms
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
