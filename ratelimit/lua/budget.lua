-- Budgets (Config.Budget, budget.go): a limiter whose grants also spend a
-- model endpoint's requests and tokens per window, shared by every
-- instance. A request is granted when a permit is free (lib.lua's claim)
-- AND the budget has room for it after the live requests ahead of it, so a
-- large request is not overtaken by small ones behind it.
--
-- Each dimension is a GCRA, as rate.lua: a theoretical arrival time (TAT,
-- ms of Redis TIME) that a grant moves on by cost * interval, with interval
-- = window / (limit * scale). A grant fits while the TAT stays within one
-- window of now, so no sliding window sees more than the limit. scale
-- (BUDGET_MIN_SCALE..1) is halved by each refusal of the provider
-- (throttle.lua) and climbs back by BUDGET_RECOVERY per window.
--
-- The budget hash: rt, tt (the TATs of requests and tokens), scale, sts (ms
-- when scale was last written). A queued request's token cost is kept in
-- entry_prefix .. id .. ':cost', which expires with its entry marker.

local BUDGET_MIN_SCALE = 0.0625
local BUDGET_RECOVERY = 0.5

-- budget_load reads a budget at now_ms. rl and tl are the limits per window
-- (0: that dimension is unlimited).
local function budget_load(key, rl, tl, window, now_ms)
  local v = redis.call('HMGET', key, 'rt', 'tt', 'scale', 'sts')
  local scale = tonumber(v[3] or '1')
  if v[4] then
    scale = math.min(1, scale + (now_ms - tonumber(v[4])) / window * BUDGET_RECOVERY)
  end
  return {key = key, rl = rl, tl = tl, window = window, now = now_ms, scale = scale,
    rt = math.max(tonumber(v[1] or '0'), now_ms), tt = math.max(tonumber(v[2] or '0'), now_ms),
    ahead_r = 0, ahead_t = 0, cost = 0}
end

-- budget_args builds the budget a claim checks from its budget key and
-- ARGV[first..first+3] (request limit, token limit, window ms); nil when the
-- limiter has none (the key is '' or both limits are 0).
local function budget_args(key, first, now_ms)
  local rl, tl = tonumber(ARGV[first] or '0'), tonumber(ARGV[first + 1] or '0')
  if not key or key == '' or (rl <= 0 and tl <= 0) then
    return nil
  end
  return budget_load(key, rl, tl, tonumber(ARGV[first + 2]), now_ms)
end

local function budget_interval(b, limit)
  return b.window / (limit * b.scale)
end

-- budget_cost is the token cost of the queued request whose cost key is
-- ckey, never more than the (shrunk) budget holds, so it can always fit.
local function budget_cost(b, ckey)
  local t = tonumber(redis.call('GET', ckey) or '0')
  if b.tl > 0 then
    t = math.min(t, math.floor(b.tl * b.scale))
  end
  return t
end

-- budget_ahead counts live request m ahead of the claimer: it is served
-- first, so its cost is spent first.
local function budget_ahead(b, entry_prefix, m)
  b.ahead_r = b.ahead_r + 1
  b.ahead_t = b.ahead_t + budget_cost(b, entry_prefix .. m .. ':cost')
end

-- budget_wait returns how long (ms) until the budget has room for request
-- id after the requests ahead; 0 when it fits now.
local function budget_wait(b, entry_prefix, id)
  b.cost = budget_cost(b, entry_prefix .. id .. ':cost')
  local wait = 0
  if b.rl > 0 then
    wait = math.max(wait, b.rt + (b.ahead_r + 1) * budget_interval(b, b.rl) - b.now - b.window)
  end
  if b.tl > 0 and b.cost > 0 then
    wait = math.max(wait, b.tt + (b.ahead_t + b.cost) * budget_interval(b, b.tl) - b.now - b.window)
  end
  return math.ceil(wait)
end

local function budget_save(b)
  redis.call('HSET', b.key, 'rt', string.format('%.3f', b.rt), 'tt', string.format('%.3f', b.tt),
    'scale', tostring(b.scale), 'sts', string.format('%.0f', b.now))
  -- Unused for long enough, the budget is full and its scale back at 1.
  local last = math.max(b.rt, b.tt) - b.now
  redis.call('PEXPIRE', b.key, math.ceil(last + b.window * (1 / BUDGET_RECOVERY + 1)))
end

-- budget_take spends request id's cost (budget_wait ran first).
local function budget_take(b, entry_prefix, id)
  if b.rl > 0 then
    b.rt = b.rt + budget_interval(b, b.rl)
  end
  if b.tl > 0 then
    b.tt = b.tt + b.cost * budget_interval(b, b.tl)
  end
  budget_save(b)
  redis.call('DEL', entry_prefix .. id .. ':cost')
end
