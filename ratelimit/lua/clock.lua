-- The clock prelude: every script that needs the time reads it from Redis
-- TIME through these, never from a client clock, so instances with skewed
-- clocks agree on lease expiry.

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function now_ms()
  return math.floor(now_us() / 1000)
end
