-- Release a permit of a limiter with a budget and settle its reservation in
-- the same round trip: the tokens the call really spent replace the ones
-- reserved at the grant (a refund moves the token TAT back, never before
-- now; an overrun moves it on). Wakes the waiters as release.lua.
--
-- KEYS: permits, owners, held, budget
-- ARGV: id, notify_channel, req_limit, tok_limit, window_ms, reserved, used
-- Reply: permits in use
local now = now_us()
if drop_permit(KEYS[1], KEYS[2], KEYS[3], ARGV[1]) == 1 then
  redis.call('PUBLISH', ARGV[2], string.format('%.0f', now))
end
local b = budget_args(KEYS[4], 3, math.floor(now / 1000))
local reserved, used = tonumber(ARGV[6]), tonumber(ARGV[7])
if b and b.tl > 0 and used >= 0 and used ~= reserved then
  b.tt = math.max(b.tt + (used - reserved) * budget_interval(b, b.tl), b.now)
  budget_save(b)
end
return redis.call('ZCARD', KEYS[1])
