-- Give back one reserved login attempt on each counter, or clear it.
-- KEYS[i] a counter; ARGV[i] '1' clears it (a success ends the failures
-- counted against this device or this account from this address), '0'
-- gives back this attempt only (the failures others made stay counted).
for i, key in ipairs(KEYS) do
  local n = tonumber(redis.call('GET', key) or '0')
  if ARGV[i] == '1' or n <= 1 then
    redis.call('DEL', key)
  else
    redis.call('DECR', key)
  end
end
return 0
