-- Release a permit and wake the waiters. The notification carries Redis
-- TIME (µs) so a waiter can measure handoff latency on the same clock.
--
-- KEYS: permits, owners, held, and a limiter's queue
-- ARGV: id, notify_channel
-- (A semaphore has no owners: its permits have no owner entry, and the
-- held count is left alone. It has no queue either: its waiters are not
-- known, so every release wakes them.)
--
-- With the queue empty nobody waits for the notification (a waiter is
-- queued from its first call on), so none is published: a PUBLISH is
-- replicated (or, on a Cluster, sent to every node) like a write.
if drop_permit(KEYS[1], KEYS[2], KEYS[3], ARGV[1]) == 1 and
    (not KEYS[4] or redis.call('ZCARD', KEYS[4]) > 0) then
  redis.call('PUBLISH', ARGV[2], string.format('%.0f', now_us()))
end
return redis.call('ZCARD', KEYS[1])
