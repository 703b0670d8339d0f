-- Gives a lease back only while it still holds our token, so a late release
-- never frees a key another owner took after ours expired. With a guard
-- (ARGV[2] > 0) the key lingers that long instead (see idgen's margin).
-- KEYS[1] lease key; ARGV[1] owner token; ARGV[2] guard in ms.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if tonumber(ARGV[2]) > 0 then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return redis.call('DEL', KEYS[1])
