-- Deletes a lease only while it still holds our token, so a late release
-- never frees a key another owner took after ours expired.
-- KEYS[1] lease key; ARGV[1] owner token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
