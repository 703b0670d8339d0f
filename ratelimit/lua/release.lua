-- Release a permit and wake the waiters. The notification carries Redis
-- TIME (µs) so a waiter can measure handoff latency on the same clock.
--
-- KEYS: permits, owners, held
-- ARGV: id, notify_channel
-- (A semaphore has no owners: its permits have no owner entry, and the
-- held count is left alone.)
if drop_permit(KEYS[1], KEYS[2], KEYS[3], ARGV[1]) == 1 then
  redis.call('PUBLISH', ARGV[2], string.format('%.0f', now_us()))
end
return redis.call('ZCARD', KEYS[1])
