-- Claim a permit for a queued request (see claim in lib.lua).
--
-- KEYS: queue, permits, users, owners, held, deadlines, entry_prefix
-- ARGV: id, max, lease_ms, window, cap (the running cap, 0 for none)
return claim(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7],
  ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5] or '0'), now_us(), false)
