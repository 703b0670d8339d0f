-- Shared functions, prepended to the scripts that use them when the Go code
-- builds them (Redis has no script includes).
--
-- Times come from Redis TIME (clock.lua), never from a client clock, so
-- instances with skewed clocks agree on lease expiry.
--
-- The fairness rule. A queued request's score is
--   level * LEVEL_UNIT + seq
-- where seq is the global arrival sequence and level is how many requests
-- its user already had in flight (holding a permit or queued) when it
-- arrived. The queue is served in score order: every request of a user with
-- fewer requests in flight goes ahead of a request that is its user's k-th
-- or later, and requests of the same level keep their arrival order across
-- all instances (FIFO among equals). A user alone in the queue still gets
-- every free permit: the level only orders waiters, it never caps anyone.
-- The level is fixed at arrival; a user whose streams finish while their
-- request waits keeps its place in the order it was given. A new request is
-- never given a lower level than its user's latest request still queued
-- (levels): a user's requests keep their order, and a user whose count
-- dipped for a moment (two streams ended before the next question arrived)
-- does not jump the requests of other users queued at the level its own
-- queued requests hold.
--
-- The running cap (cap > 0, Config.MaxRunningPerUser). A user holding cap
-- permits or more is passed over while a request of another user below the
-- cap waits: that request gets the freed permit even when the capped user's
-- request is ahead of it in the queue, and the capped request waits on. With
-- nobody below the cap waiting, the capped user is served in queue order, so
-- a user alone still gets every permit.
--
-- Bookkeeping (all in this limiter's hash tag):
--   users  user -> requests queued (the per-user queue cap, and the level)
--   levels user -> fairness level (the class level left out) of its latest
--          request still queued; gone with the user's last queued request
--   held   user -> permits held (the level)
--   owners id -> user, for queued requests and held permits, so a permit's
--          release or expiry can lower its user's held count.
--   deadlines  id -> when its entry marker expires (ms): a waiter past it is
--          gone, so the request is forgotten even if no claim scans past it
--          (a high level can keep it behind everyone else's).

-- LEVEL_UNIT keeps scores exact doubles: levels up to MAX_LEVEL and
-- sequences below 2^43 (8.8e12 arrivals) fit in 53 bits.
local LEVEL_UNIT = 8796093022208 -- 2^43
local MAX_LEVEL = 1023

-- decr lowers a count, deleting it at zero: one replicated write either
-- way (every write of a script goes to the replicas, and costs the primary's
-- reply time there, docs/benchmarks/redis-topologies.md).
-- Returns true when the count is gone.
local function decr(hash, field)
  if tonumber(redis.call('HGET', hash, field) or '0') <= 1 then
    redis.call('HDEL', hash, field)
    return true
  end
  redis.call('HINCRBY', hash, field, -1)
  return false
end

-- unqueued lowers user's queued count as one of its requests leaves the
-- queue; with the last one its level goes too.
local function unqueued(users, levels, user)
  if decr(users, user) then
    redis.call('HDEL', levels, user)
  end
end

-- forget removes a queued request's bookkeeping: its queue member, marker,
-- deadline, owner and its user's queued count. Returns 1 when it was queued.
local function forget(queue, users, levels, owners, deadlines, entry_prefix, id)
  redis.call('DEL', entry_prefix .. id)
  redis.call('ZREM', deadlines, id)
  if redis.call('ZREM', queue, id) == 0 then
    return 0
  end
  local user = redis.call('HGET', owners, id)
  if user then
    redis.call('HDEL', owners, id)
    unqueued(users, levels, user)
  end
  return 1
end

-- sweep forgets the queued requests whose waiter is past its deadline (its
-- instance died, or it could not leave): wherever they stand in the queue,
-- they stop counting towards their users' queue caps and levels.
local function sweep(queue, users, levels, owners, deadlines, entry_prefix, now_ms)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', deadlines, '-inf', '(' .. now_ms)) do
    forget(queue, users, levels, owners, deadlines, entry_prefix, m)
  end
end

-- drop_permit removes a permit and lowers its user's held count. Returns 1
-- when the permit was held. The owner entry is cleared even when the permit
-- itself had vanished (a Redis data loss that spared the hashes), so the
-- counts cannot drift.
local function drop_permit(permits, owners, held, id)
  local removed = redis.call('ZREM', permits, id)
  local user = redis.call('HGET', owners, id)
  if user then
    redis.call('HDEL', owners, id)
    decr(held, user)
  end
  return removed
end

-- expire drops the permits whose lease ended (a crashed holder stopped
-- renewing), one by one so their users' held counts follow.
local function expire(permits, owners, held, now_ms)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', permits, '-inf', '(' .. now_ms)) do
    drop_permit(permits, owners, held, m)
  end
end

-- fairness is the fairness level of a new request of user (see the fairness
-- rule): its user's requests in flight, and at least the level of the
-- user's latest request still queued. A level stored while the user has
-- nothing queued (left by an older instance) is ignored.
local function fairness(users, levels, held, user)
  local queued = tonumber(redis.call('HGET', users, user) or '0')
  local level = tonumber(redis.call('HGET', held, user) or '0') + queued
  if queued > 0 then
    level = math.max(level, tonumber(redis.call('HGET', levels, user) or '0'))
  end
  return level
end

-- score is the queue score of a request of fairness level level and
-- arrival seq. base is the request's class level (Limiter.AcquireClass),
-- added to its fairness level: a class of a higher base waits behind every
-- request of a lower one (document embeddings behind queries).
local function score(level, seq, base)
  return string.format('%.0f', math.min(base + level, MAX_LEVEL) * LEVEL_UNIT + seq % LEVEL_UNIT)
end

-- queued_level records level as user's latest queued request's, when it is
-- above the one recorded (a write only when it changes): the level a new
-- request of the user starts from (fairness).
local function queued_level(users, levels, user, level)
  local queued = tonumber(redis.call('HGET', users, user) or '0')
  local stored = tonumber(redis.call('HGET', levels, user) or '-1')
  if queued == 0 or level > stored then
    redis.call('HSET', levels, user, level)
  end
end

-- claim tries to move request id from the queue to the permits. swept says
-- the caller already dropped expired permits and dead waiters at now.
--
-- Replies:
--   {1, permits_in_use, queue_length, now_us, reserved_tokens, place}  granted
--   {0, position, queue_length, now_us, free_permits}    still waiting
--   {-1, 0, queue_length, now_us}                        not queued (lost)
--
-- Zombies (queue members whose entry marker has expired because their
-- instance died) are swept by their deadline wherever they stand, and
-- dropped from the head window as they are met. The
-- entry markers' names are only known here, so they are built from
-- entry_prefix, which carries the same hash tag as every KEYS entry and so
-- lives in the same cluster slot.
-- capped reports whether user holds cap permits or more (never when cap is 0).
local function capped(held, user, cap)
  return cap > 0 and user ~= false and user ~= nil and
    tonumber(redis.call('HGET', held, user) or '0') >= cap
end

-- uncapped_waiting reports whether a live request of a user other than user,
-- below the cap, waits within the queue's first window members.
local function uncapped_waiting(queue, owners, held, entry_prefix, user, cap, window)
  for _, m in ipairs(redis.call('ZRANGE', queue, 0, window - 1)) do
    local u = redis.call('HGET', owners, m)
    if u and u ~= user and redis.call('EXISTS', entry_prefix .. m) == 1 and not capped(held, u, cap) then
      return true
    end
  end
  return false
end

-- budget (budget.lua; nil for a limiter without one) makes a grant also
-- need room in the budget after the live requests ahead; the waiting reply
-- then carries two more fields: 1 when only the budget is missing, and the
-- ms until it has room.
local function claim(queue, permits, users, levels, owners, held, deadlines, entry_prefix, id, max, lease_ms, window, cap, now, swept, budget)
  local now_ms = math.floor(now / 1000)
  if not swept then
    expire(permits, owners, held, now_ms)
    sweep(queue, users, levels, owners, deadlines, entry_prefix, now_ms)
  end
  local in_use = redis.call('ZCARD', permits)
  if redis.call('ZSCORE', permits, id) then
    -- Granted by an earlier call whose reply was lost.
    return {1, in_use, redis.call('ZCARD', queue), now}
  end
  local rank = redis.call('ZRANK', queue, id)
  if not rank then
    return {-1, 0, redis.call('ZCARD', queue), now}
  end
  local free = max - in_use
  local user = redis.call('HGET', owners, id)
  local me_capped = capped(held, user, cap)
  -- passed counts the live members ahead that yield to this request: their
  -- users are at the cap and this one's is not (the running cap).
  local live_ahead, dropped, passed = 0, 0, 0
  local scan = math.min(rank, window)
  if scan > 0 then
    local head = redis.call('ZRANGE', queue, 0, scan - 1)
    for _, m in ipairs(head) do
      if redis.call('EXISTS', entry_prefix .. m) == 1 then
        local u = redis.call('HGET', owners, m)
        if cap > 0 and not me_capped and u ~= user and capped(held, u, cap) then
          passed = passed + 1
        else
          live_ahead = live_ahead + 1
          if budget then budget_ahead(budget, entry_prefix, m) end
          -- Enough is known to refuse; with the running cap the scan goes
          -- on to count who yields, for the position.
          if live_ahead >= free and (cap == 0 or me_capped) then
            break
          end
        end
      else
        forget(queue, users, levels, owners, deadlines, entry_prefix, m)
        dropped = dropped + 1
      end
    end
  end
  -- Members beyond the scanned window are counted as live: granting needs
  -- every member ahead to have been seen.
  local slot = scan == rank and live_ahead < free and
    not (me_capped and uncapped_waiting(queue, owners, held, entry_prefix, user, cap, window))
  local budget_ms = 0
  if slot and budget then budget_ms = budget_wait(budget, budget_cost(budget, entry_prefix .. id .. ':cost')) end
  if slot and budget_ms <= 0 then
    -- Move the request from queued to held; its owner entry stays for the
    -- permit's release or expiry.
    -- The grant's reply carries the request's place, for a retry after
    -- the provider refused the call (enqueue.lua's place).
    local place = redis.call('ZSCORE', queue, id)
    redis.call('DEL', entry_prefix .. id)
    redis.call('ZREM', deadlines, id)
    redis.call('ZREM', queue, id)
    if user then
      unqueued(users, levels, user)
      redis.call('HINCRBY', held, user, 1)
    end
    redis.call('ZADD', permits, now_ms + lease_ms, id)
    if budget then
      budget_take(budget, entry_prefix, id)
      return {1, in_use + 1, redis.call('ZCARD', queue), now, budget.cost, tonumber(place)}
    end
    return {1, in_use + 1, redis.call('ZCARD', queue), now, 0, tonumber(place)}
  end
  if budget then
    return {0, rank - dropped - passed + 1, redis.call('ZCARD', queue), now, free, slot and 1 or 0, budget_ms}
  end
  return {0, rank - dropped - passed + 1, redis.call('ZCARD', queue), now, free}
end
