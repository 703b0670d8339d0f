-- Claim a permit for a queued request (see claim in lib.lua).
--
-- KEYS: queue, permits, users, owners, held, deadlines, entry_prefix
-- ARGV: id, max, lease_ms, window, cap (the running cap, 0 for none)
-- Last KEY and last two ARGV: the failover fence's (fence.lua).
local now = now_us()
-- Fence: after a failover, grant nothing until holders re-asserted.
local fenced = fence_held(math.floor(now / 1000))
local r = claim(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7],
  ARGV[1], fenced and 0 or tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), now, false)
return fenced_reply(r, fenced)
