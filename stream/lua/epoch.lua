-- The registry's epoch: the moment (ms of Redis TIME) this Redis first held
-- the registry. A Redis that lost its data (restarted empty, or a promoted
-- replica that lacked it) has no epoch, or a new one: the task records are
-- still being rewritten by the instances that run them, so a task missing
-- from it may be running (Manager.Owner).
-- KEYS[1] epoch key; ARGV[1] '1' to create it when missing, '0' to read
-- Reply: {now ms, the epoch (-1 when missing and not created)}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('GET', KEYS[1])
if v then
  return {now, tonumber(v)}
end
if ARGV[1] == '1' then
  redis.call('SET', KEYS[1], string.format('%.0f', now))
  return {now, now}
end
return {now, -1}
