-- Read a budget: what the current window has spent of it.
--
-- KEYS: budget
-- ARGV: req_limit, tok_limit, window_ms
-- Reply: {requests_in_use, tokens_in_use, scale in thousandths}
local b = budget_args(KEYS[1], 1, now_ms())
if not b then
  return {0, 0, 1000}
end
local r, t = 0, 0
if b.rl > 0 then
  r = math.floor((b.rt - b.now) / budget_interval(b, b.rl))
end
if b.tl > 0 then
  t = math.floor((b.tt - b.now) / budget_interval(b, b.tl))
end
return {r, t, math.floor(b.scale * 1000)}
