-- Budgets (Config.Budget, budget.go): a limiter whose grants also spend a
-- model endpoint's requests and tokens per window, shared by every
-- instance. A request is granted when a permit is free (lib.lua's claim)
-- AND the budget has room for it after the live requests ahead of it, so a
-- large request is not overtaken by small ones behind it.
--
-- The budget is a sliding window, as providers count: a log of the grants
-- of the last window (key..':log', id -> grant time ms) with each grant's
-- tokens (key..':cost', id -> tokens, settled to what the call spent when it
-- ends). A grant fits while the log's requests + 1 and tokens + its own stay
-- within limit * scale. (A token bucket would let a full bucket plus a
-- window's refill through in one window, which a provider counting per
-- sliding window refuses.) scale (BUDGET_MIN_SCALE..1) is halved by each
-- refusal of the provider (throttle.lua) and climbs back by BUDGET_RECOVERY
-- per window; until (ms) holds every grant back while a Retry-After lasts.
--
-- The window's edge. A grant enters the log at its Redis TIME; the provider
-- counts the call from when it receives it, a dispatch delay later that
-- varies from call to call (the reply, the caller's goroutine, the HTTP
-- write; tens of ms on a loaded machine). A call granted as an older one
-- leaves the window, but dispatched faster than it, reached the provider
-- while the provider still counted the older one, and was refused (in
-- BenchmarkBudgets every 429 with budgets came 0.1-12 ms before the
-- provider's window moved on). So a grant stays in the log for the window
-- plus BUDGET_EDGE of it (the span): a dispatch delay up to 1 % of the
-- window longer than the next call's is covered, for at most 1 % of the
-- throughput.
--
-- The budget reserve (Class.BudgetReserve): a request of a class with a
-- reserve r > 0 (document batches) fits only within (1 - r) of the limits
-- while a request of a class without one (a search question) was granted
-- within the last window (qts), so a question never waits for budget the
-- batches took; with no question for a window the batches get it all.
--
-- The budget hash: used (tokens in the log), scale, sts (ms when scale was
-- written), until, qts (ms of the last grant without a reserve). A queued request's token cost waits in
-- entry_prefix .. id .. ':cost', which expires with its entry marker.

local BUDGET_MIN_SCALE = 0.0625
local BUDGET_RECOVERY = 0.5
-- BUDGET_SCAN bounds the log entries a wait estimate reads.
local BUDGET_SCAN = 256
-- BUDGET_EDGE is the part of the window a grant stays in the log beyond it.
local BUDGET_EDGE = 0.01

-- budget_load reads a budget at now_ms, dropping the grants older than a
-- span (the window and its edge). rl and tl are the limits per window (0:
-- that one is unlimited).
local function budget_load(key, rl, tl, window, now_ms)
  local log, costs = key .. ':log', key .. ':cost'
  local v = redis.call('HMGET', key, 'used', 'scale', 'sts', 'until', 'qts')
  local used = tonumber(v[1] or '0')
  local span = window + math.ceil(window * BUDGET_EDGE)
  local old = redis.call('ZRANGEBYSCORE', log, '-inf', now_ms - span)
  if #old > 0 then
    for _, id in ipairs(old) do
      used = used - tonumber(redis.call('HGET', costs, id) or '0')
      redis.call('HDEL', costs, id)
    end
    redis.call('ZREMRANGEBYSCORE', log, '-inf', now_ms - span)
    used = math.max(used, 0)
    redis.call('HSET', key, 'used', used)
  end
  local scale = tonumber(v[2] or '1')
  if v[3] then
    scale = math.min(1, scale + (now_ms - tonumber(v[3])) / window * BUDGET_RECOVERY)
  end
  return {key = key, log = log, costs = costs, rl = rl, tl = tl, window = window, span = span, now = now_ms,
    scale = scale, stored_scale = v[2], used = used, n = redis.call('ZCARD', log), untl = tonumber(v[4] or '0'),
    qts = tonumber(v[5] or '0'), reserve = 0, ahead_r = 0, ahead_t = 0, cost = 0}
end

-- budget_args builds the budget a claim checks from its budget key and
-- ARGV[first..first+2] (request limit, token limit, window ms) and, when
-- reserve_at is given, the claiming class's reserve in thousandths at
-- ARGV[reserve_at]; nil when the limiter has none (the key is '' or both
-- limits are 0).
local function budget_args(key, first, now_ms, reserve_at)
  local rl, tl = tonumber(ARGV[first] or '0'), tonumber(ARGV[first + 1] or '0')
  if not key or key == '' or (rl <= 0 and tl <= 0) then
    return nil
  end
  local b = budget_load(key, rl, tl, tonumber(ARGV[first + 2]), now_ms)
  if reserve_at then
    b.reserve = math.min(math.max(tonumber(ARGV[reserve_at] or '0'), 0), 999) / 1000
  end
  return b
end

-- budget_limit is a dimension's limit now (at least 1).
local function budget_limit(b, limit)
  return math.max(math.floor(limit * b.scale), 1)
end

-- budget_clip is a token cost t never more than the (shrunk) budget holds,
-- so it can always fit.
local function budget_clip(b, t)
  if b.tl > 0 then
    t = math.min(t, budget_limit(b, b.tl))
  end
  return t
end

-- budget_cost is the token cost of the queued request whose cost key is
-- ckey (budget_clip'ed).
local function budget_cost(b, ckey)
  return budget_clip(b, tonumber(redis.call('GET', ckey) or '0'))
end

-- budget_ahead counts live request m ahead of the claimer: it is served
-- first, so its cost is spent first.
local function budget_ahead(b, entry_prefix, m)
  b.ahead_r = b.ahead_r + 1
  b.ahead_t = b.ahead_t + budget_cost(b, entry_prefix .. m .. ':cost')
end

-- budget_reserving reports whether the claimer's class leaves its reserve
-- to the classes without one: one of theirs was granted within a window.
local function budget_reserving(b)
  return b.reserve > 0 and b.qts > b.now - b.window
end

-- budget_free_at is when (ms) enough of the log's oldest grants have left
-- the span for over_r requests and over_t tokens to fit.
local function budget_free_at(b, over_r, over_t)
  local oldest = redis.call('ZRANGE', b.log, 0, BUDGET_SCAN - 1, 'WITHSCORES')
  local freed_r, freed_t = 0, 0
  for i = 1, #oldest, 2 do
    freed_r = freed_r + 1
    freed_t = freed_t + tonumber(redis.call('HGET', b.costs, oldest[i]) or '0')
    if freed_r >= over_r and freed_t >= over_t then
      return tonumber(oldest[i + 1]) + b.span
    end
  end
  return b.now + b.span -- nothing known: a span
end

-- budget_wait returns how long (ms) until the budget should have room for
-- a request of cost tokens (budget_cost) after the requests ahead (0: it
-- fits now): when enough of the log's oldest grants leave the window.
local function budget_wait(b, cost)
  b.cost = cost
  local wait = math.max(b.untl - b.now, 0)
  local lim_r, lim_t = budget_limit(b, b.rl), budget_limit(b, b.tl)
  local reserving = budget_reserving(b)
  if reserving then
    lim_r = math.max(math.floor(lim_r * (1 - b.reserve)), 1)
    lim_t = math.max(math.floor(lim_t * (1 - b.reserve)), 1)
    if b.tl > 0 then
      b.cost = math.min(b.cost, lim_t)
    end
  end
  local over_r, over_t = 0, 0
  if b.rl > 0 then
    over_r = b.n + b.ahead_r + 1 - lim_r
  end
  if b.tl > 0 and b.cost > 0 then
    over_t = b.used + b.ahead_t + b.cost - lim_t
  end
  if over_r <= 0 and over_t <= 0 then
    return math.ceil(wait)
  end
  local free = budget_free_at(b, over_r, over_t) - b.now
  if reserving then
    -- The reserve lapses a window after the last question: room then.
    free = math.min(free, b.qts + b.window - b.now)
  end
  return math.ceil(math.max(wait, free, 1))
end

-- budget_save writes the budget back, and only what changed (every write
-- is replicated): used, qts when given (a grant without a reserve), and the
-- scale with its time once it is not a full budget's 1 any more. The
-- expiry is set again only when it ran down by half a window, so the keys
-- of a busy budget get theirs about twice a window, not at every grant.
local function budget_save(b, qts)
  local f = {'used', b.used}
  if qts then
    f[#f + 1], f[#f + 2] = 'qts', string.format('%.0f', qts)
  end
  if b.scale < 1 or (b.stored_scale and b.stored_scale ~= '1') then
    f[#f + 1], f[#f + 2] = 'scale', tostring(b.scale)
    f[#f + 1], f[#f + 2] = 'sts', string.format('%.0f', b.now)
  end
  redis.call('HSET', b.key, unpack(f))
  -- Unused for long enough, the log is empty and the scale back at 1.
  local ttl = math.ceil(b.window * (1 / BUDGET_RECOVERY + 1) + math.max(b.untl - b.now, 0))
  for _, k in ipairs({b.key, b.log, b.costs}) do
    local left = redis.call('PTTL', k)
    if left == -1 or (left >= 0 and left < ttl - b.window / 2) then
      redis.call('PEXPIRE', k, ttl)
    end
  end
end

-- budget_take spends request id's cost (budget_wait ran first). A retry
-- under the same id replaces the refused try's entry.
local function budget_take(b, entry_prefix, id)
  b.used = b.used - tonumber(redis.call('HGET', b.costs, id) or '0') + b.cost
  redis.call('ZADD', b.log, b.now, id)
  redis.call('HSET', b.costs, id, b.cost)
  budget_save(b, b.reserve == 0 and b.now or nil)
  -- A request granted at once never had its cost key (enqueue.lua); a
  -- DEL of no key is not replicated.
  redis.call('DEL', entry_prefix .. id .. ':cost')
end
