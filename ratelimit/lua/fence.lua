-- The failover fence, a prelude of the grant scripts (enqueue, claim, try)
-- and of renew. Redis replicates asynchronously: a replica promoted by
-- Sentinel or Cluster (or a primary restarted empty) may have lost permits
-- granted just before, while their holders still run. Granting those slots
-- again would put more than max to work. So each of these scripts compares
-- the server's replication id (INFO replication master_replid, which a
-- promotion or a restart changes) with the one stored in the fence key;
-- when it differs (or the key is gone with the data, and the caller has
-- talked to this limiter before), grants are held for hold_ms: one renewal
-- period plus a second, within which every running holder renews, and
-- renew re-creates a permit lost in the failover (renew.lua). Only then
-- are the free slots known, and granted again.
--
-- Calling convention, kept apart from each script's own keys and
-- arguments so both can grow: the fence key is always the script's LAST
-- KEY, and its two arguments are always the LAST TWO ARGV:
--   ARGV[#ARGV-1] seen: '1' when this instance has talked to the limiter
--                 before (so a missing fence key means lost data, not a
--                 first start)
--   ARGV[#ARGV]   hold_ms
-- The fence key is a hash: replid (the primary's id last seen), until (ms
-- of Redis TIME until which grants are held).
local function fence_held(now_ms)
  local key = KEYS[#KEYS]
  local seen, hold_ms = ARGV[#ARGV - 1], tonumber(ARGV[#ARGV])
  local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') or ''
  local f = redis.call('HMGET', key, 'replid', 'until')
  if f[1] == replid then
    return tonumber(f[2] or '0') > now_ms
  end
  local until_ms = 0
  if f[1] or seen == '1' then
    until_ms = now_ms + hold_ms
  end
  redis.call('HSET', key, 'replid', replid, 'until', string.format('%.0f', until_ms))
  return until_ms > now_ms
end

-- fenced_reply marks a waiting claim reply held by the fence: a sixth
-- element 1, and no free permits, so the waiter polls on every tick (no
-- release is published when the hold ends) instead of counting releases.
local function fenced_reply(r, fenced)
  if fenced and r[1] == 0 then
    r[5] = 0
    r[6] = 1
  end
  return r
end
