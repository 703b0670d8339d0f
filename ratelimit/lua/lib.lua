-- Shared functions, prepended to enqueue.lua and claim.lua when the Go code
-- builds those scripts (Redis has no script includes).
--
-- Times come from Redis TIME, never from a client clock, so instances with
-- skewed clocks agree on lease expiry.

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- forget removes a queued request's bookkeeping: its queue member, marker,
-- owner and its user's queued count. Returns 1 when it was queued.
local function forget(queue, users, owners, entry_prefix, id)
  redis.call('DEL', entry_prefix .. id)
  if redis.call('ZREM', queue, id) == 0 then
    return 0
  end
  local user = redis.call('HGET', owners, id)
  if user then
    redis.call('HDEL', owners, id)
    if redis.call('HINCRBY', users, user, -1) <= 0 then
      redis.call('HDEL', users, user)
    end
  end
  return 1
end

-- claim tries to move request id from the queue to the permits.
--
-- Replies:
--   {1, permits_in_use, queue_length, now_us}            granted
--   {0, position, queue_length, now_us, free_permits}    still waiting
--   {-1, 0, queue_length, now_us}                        not queued (lost)
--
-- Zombies (queue members whose entry marker has expired because their
-- instance died) are dropped from the head window as they are met. The
-- entry markers' names are only known here, so they are built from
-- entry_prefix, which carries the same hash tag as every KEYS entry and so
-- lives in the same cluster slot.
local function claim(queue, permits, users, owners, entry_prefix, id, max, lease_ms, window, now)
  local now_ms = math.floor(now / 1000)
  redis.call('ZREMRANGEBYSCORE', permits, '-inf', '(' .. now_ms)
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
  local live_ahead, dropped = 0, 0
  local scan = math.min(rank, window)
  if scan > 0 then
    local head = redis.call('ZRANGE', queue, 0, scan - 1)
    for _, m in ipairs(head) do
      if redis.call('EXISTS', entry_prefix .. m) == 1 then
        live_ahead = live_ahead + 1
        if live_ahead >= free then
          break
        end
      else
        forget(queue, users, owners, entry_prefix, m)
        dropped = dropped + 1
      end
    end
  end
  -- Members beyond the scanned window are counted as live: granting needs
  -- every member ahead to have been seen.
  if scan == rank and live_ahead < free then
    forget(queue, users, owners, entry_prefix, id)
    redis.call('ZADD', permits, now_ms + lease_ms, id)
    return {1, in_use + 1, redis.call('ZCARD', queue), now}
  end
  return {0, rank - dropped + 1, redis.call('ZCARD', queue), now, free}
end
