-- Read a budget: what the current window has spent of it.
--
-- KEYS: budget
-- ARGV: req_limit, tok_limit, window_ms
-- Reply: {requests_in_use, tokens_in_use, scale in thousandths}
local b = budget_args(KEYS[1], 1, now_ms())
if not b then
  return {0, 0, 1000}
end
return {b.n, math.floor(b.used), math.floor(b.scale * 1000)}
