-- Delete the task record only if this instance wrote it, so a late
-- unregister never removes a record another instance owns.
-- KEYS[1] task key, ARGV[1] our instance id
if redis.call('HGET', KEYS[1], 'instance') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
