-- Reserve one login attempt on every counter of a group, or on none.
-- KEYS[i] a counter, ARGV[i] its limit; ARGV[#KEYS+1] the window (ms)
-- Returns 0 when the attempt is counted, else the ms until the full
-- counter's window ends (at least 1).
local window = tonumber(ARGV[#KEYS + 1])

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

local w = 0
for i, key in ipairs(KEYS) do
  w = math.max(w, wait(key, tonumber(ARGV[i])))
end
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
