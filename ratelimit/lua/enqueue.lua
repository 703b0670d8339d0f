-- Enqueue a request and try to claim a permit at once, so an uncontended
-- grant costs one round trip.
--
-- KEYS: seq, queue, permits, users, owners, held, deadlines, entry_prefix, levels
-- ARGV: id, user, max, lease_ms, marker_ttl_ms, max_queue, max_per_user, window, base_level, cap,
--   place (a score: a request the provider refused takes back the place it
--   had, with or without a budget; 0 for a new place)
-- Last KEY and last two ARGV: the failover fence's (fence.lua).
--
-- Replies as claim, plus {-2} when the queue is full and {-3} when the user
-- has too many queued requests. Enqueueing an id that is already queued or
-- granted is a no-op, so a retried call does not enqueue twice. The request's
-- place follows the fairness rule in lib.lua: its level is its user's
-- requests in flight (held + queued) at this moment, and at least the level
-- of its user's latest request still queued.
--
-- A limiter with a budget (budget.lua) adds KEYS[10] budget and ARGV[12..16]
-- (before the fence's, so a budget makes 11 KEYS, none 10):
-- tokens (the request's cost), req_limit, tok_limit, window_ms and the
-- class's budget reserve (thousandths, budget.lua).
local seq, queue, permits, users, owners, held, deadlines, entry_prefix, levels =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local id, user = ARGV[1], ARGV[2]
local max, lease_ms, ttl_ms = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local max_queue, max_per_user, window = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local base = tonumber(ARGV[9] or '0')
local cap = tonumber(ARGV[10] or '0')
local place = tonumber(ARGV[11] or '0')
local has_budget = #KEYS == 11

local now = now_us()
local now_ms = math.floor(now / 1000)
-- Expired permits and waiters past their deadline no longer count towards
-- the caps and the users' levels.
expire(permits, owners, held, now_ms)
sweep(queue, users, levels, owners, deadlines, entry_prefix, now_ms)
-- Fence: after a failover, queue but grant nothing until holders re-asserted.
local fenced = fence_held(now_ms)
local budget = has_budget and budget_args(KEYS[10], 13, now_ms, 16) or nil
if not redis.call('ZSCORE', queue, id) and not redis.call('ZSCORE', permits, id) then
  if max_queue > 0 and redis.call('ZCARD', queue) >= max_queue then
    return {-2}
  end
  if max_per_user > 0 and tonumber(redis.call('HGET', users, user) or '0') >= max_per_user then
    return {-3}
  end
  -- level: the request's fairness level, for its user's next request
  -- (queued_level below).
  local s, level
  if place > 0 then
    s = string.format('%.0f', place)
    level = math.floor(place / LEVEL_UNIT) - base
  else
    level = fairness(users, levels, held, user)
    s = score(level, redis.call('INCR', seq), base)
  end
  -- The uncontended grant: with nobody queued, claim would grant a free
  -- permit (and room in the budget) to this request at once, so it is
  -- granted without the queue's bookkeeping. Every write of a script is
  -- replicated, and the queue entry, its marker, deadline, user count and
  -- cost key would be written only to be deleted in the same call
  -- (docs/benchmarks/redis-topologies.md): this writes the sequence, the
  -- permit, its owner and its user's held count, what claim's grant leaves.
  local in_use = redis.call('ZCARD', permits)
  if not fenced and in_use < max and redis.call('ZCARD', queue) == 0 and
      (not budget or budget_wait(budget, budget_clip(budget, tonumber(ARGV[12]))) <= 0) then
    -- A request queued before whose entry was lost (Redis lost the queue,
    -- or its marker expired) may have left its marker and deadline: they
    -- go, as claim's grant removes them (a DEL or ZREM of nothing is not
    -- replicated).
    redis.call('DEL', entry_prefix .. id)
    redis.call('ZREM', deadlines, id)
    redis.call('HSET', owners, id, user)
    redis.call('HINCRBY', held, user, 1)
    redis.call('ZADD', permits, now_ms + lease_ms, id)
    if budget then
      budget_take(budget, entry_prefix, id)
      return {1, in_use + 1, 0, now, budget.cost, tonumber(s)}
    end
    return {1, in_use + 1, 0, now, 0, tonumber(s)}
  end
  redis.call('ZADD', queue, s, id)
  if has_budget then
    redis.call('SET', entry_prefix .. id .. ':cost', ARGV[12], 'PX', ttl_ms)
  end
  -- The marker holds the enqueue time (ms) for the oldest-wait statistic.
  redis.call('SET', entry_prefix .. id, string.format('%.0f', now_ms), 'PX', ttl_ms)
  redis.call('ZADD', deadlines, now_ms + ttl_ms, id)
  redis.call('HSET', owners, id, user)
  queued_level(users, levels, user, level)
  redis.call('HINCRBY', users, user, 1)
end
local r = claim(queue, permits, users, levels, owners, held, deadlines, entry_prefix, id, fenced and 0 or max, lease_ms, window, cap, now, true, budget)
return fenced_reply(r, fenced)
