-- The provider refused a call (429, or a Retry-After): shrink the budget
-- for every instance. Its scale halves (recovering by BUDGET_RECOVERY per
-- window, budget.lua), and nothing more is granted before the Retry-After
-- ends; the calls that waited then go out as the window has room at the
-- shrunk scale, not all at once.
--
-- KEYS: budget
-- ARGV: req_limit, tok_limit, window_ms, retry_ms
-- Reply: the new scale, in thousandths
local now = now_ms()
local b = budget_args(KEYS[1], 1, now)
if not b then
  return 1000
end
b.scale = math.max(b.scale / 2, BUDGET_MIN_SCALE)
b.untl = math.max(b.untl, now + tonumber(ARGV[4]))
redis.call('HSET', b.key, 'until', string.format('%.0f', b.untl))
budget_save(b)
return math.floor(b.scale * 1000)
