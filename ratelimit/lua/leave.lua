-- Abandon a request: leave the queue and give back a permit that may have
-- been granted by a call whose reply never arrived.
--
-- KEYS: queue, permits, users, owners, held, deadlines, entry_prefix, levels
-- ARGV: id, notify_channel
local queue, permits, users, owners, held, deadlines, entry_prefix, levels =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local id, channel = ARGV[1], ARGV[2]

local queued = forget(queue, users, levels, owners, deadlines, entry_prefix, id)
local was_held = drop_permit(permits, owners, held, id)
if queued + was_held > 0 then
  -- Waiters behind (or a freed permit) may now be grantable.
  redis.call('PUBLISH', channel, string.format('%.0f', now_us()))
end
return queued + was_held
