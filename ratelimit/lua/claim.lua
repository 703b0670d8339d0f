-- Claim a permit for a queued request (see claim in lib.lua).
--
-- KEYS: queue, permits, users, owners, held, deadlines, entry_prefix, levels
-- ARGV: id, max, lease_ms, window, cap (the running cap, 0 for none)
-- A limiter with a budget adds KEYS[9] budget and ARGV[6..9] req_limit,
-- tok_limit, window_ms and the class's budget reserve (thousandths,
-- budget.lua), before the fence's: a budget makes 10 KEYS, none 9.
-- Last KEY and last two ARGV: the failover fence's (fence.lua).
local now = now_us()
local has_budget = #KEYS == 10
-- Fence: after a failover, grant nothing until holders re-asserted.
local fenced = fence_held(math.floor(now / 1000))
local r = claim(KEYS[1], KEYS[2], KEYS[3], KEYS[8], KEYS[4], KEYS[5], KEYS[6], KEYS[7],
  ARGV[1], fenced and 0 or tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), now, false,
  has_budget and budget_args(KEYS[9], 6, math.floor(now / 1000), 9) or nil)
return fenced_reply(r, fenced)
