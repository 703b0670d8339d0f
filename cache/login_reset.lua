-- After a successful password check: clear the per-address counter and give
-- back the attempt's reservation on the per-username counter.
-- KEYS[1] per-username counter, KEYS[2] per-username-and-address counter
redis.call('DEL', KEYS[2])
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n > 1 then
  redis.call('DECR', KEYS[1])
elseif n == 1 then
  redis.call('DEL', KEYS[1])
end
return 0
