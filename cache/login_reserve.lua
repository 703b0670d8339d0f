-- Reserve one login attempt on both counters, or none.
-- KEYS[1] per-username counter, KEYS[2] per-username-and-address counter
-- ARGV[1] per-username limit, ARGV[2] per-address limit, ARGV[3] window (ms)
-- Returns 0 when the attempt is counted, else the ms until the full
-- counter's window ends (at least 1).
local window = tonumber(ARGV[3])

local function wait(key, limit)
  local n = tonumber(redis.call('GET', key) or '0')
  if n < limit then
    return 0
  end
  local ttl = redis.call('PTTL', key)
  if ttl < 0 then
    -- A counter without expiry would lock the account for good.
    redis.call('PEXPIRE', key, window)
    ttl = window
  end
  return math.max(ttl, 1)
end

local w = math.max(wait(KEYS[1], tonumber(ARGV[1])), wait(KEYS[2], tonumber(ARGV[2])))
if w > 0 then
  return w
end
for _, key in ipairs(KEYS) do
  redis.call('INCR', key)
  if redis.call('PTTL', key) < 0 then
    redis.call('PEXPIRE', key, window)
  end
end
return 0
