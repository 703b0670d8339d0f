-- Give the worker id back only if we still hold it. With a guard (ARGV[2] > 0)
-- the key lingers that long instead of vanishing, so a next holder whose clock
-- lags ours by less than the guard cannot reissue one of our last IDs.
-- KEYS[1] lease key, ARGV[1] our token, ARGV[2] guard in ms
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if tonumber(ARGV[2]) > 0 then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return redis.call('DEL', KEYS[1])
