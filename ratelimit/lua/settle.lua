-- Release a permit of a limiter with a budget and settle its reservation in
-- the same round trip: the tokens the call really spent replace the ones
-- reserved at the grant, while the grant is in the window's log (budget.lua).
-- Wakes the waiters as release.lua.
--
-- KEYS: permits, owners, held, budget, queue
-- ARGV: id, notify_channel, req_limit, tok_limit, window_ms, reserved, used
-- Reply: permits in use
local now = now_us()
if drop_permit(KEYS[1], KEYS[2], KEYS[3], ARGV[1]) == 1 and redis.call('ZCARD', KEYS[5]) > 0 then
  redis.call('PUBLISH', ARGV[2], string.format('%.0f', now))
end
local b = budget_args(KEYS[4], 3, math.floor(now / 1000))
local used = tonumber(ARGV[7])
if b and used >= 0 then
  local cost = redis.call('HGET', b.costs, ARGV[1])
  if cost and tonumber(cost) ~= used then
    b.used = math.max(b.used + used - tonumber(cost), 0)
    redis.call('HSET', b.costs, ARGV[1], used)
    redis.call('HSET', b.key, 'used', b.used)
  end
end
return redis.call('ZCARD', KEYS[1])
