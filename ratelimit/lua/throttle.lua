-- The provider refused a call (429, or a Retry-After): shrink the budget
-- for every instance. Its scale halves (recovering by BUDGET_RECOVERY per
-- window, budget.lua), and nothing more is granted before the Retry-After
-- ends; after it the budget refills at the shrunk rate, so the calls that
-- waited go out gradually, not all at once.
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
local after = now + tonumber(ARGV[4])
if b.rl > 0 then
  b.rt = math.max(b.rt, after + b.window - budget_interval(b, b.rl))
end
if b.tl > 0 then
  b.tt = math.max(b.tt, after + b.window)
end
budget_save(b)
return math.floor(b.scale * 1000)
