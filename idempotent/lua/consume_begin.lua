-- Marks a message as being consumed unless it already has a state, and
-- returns the previous state in the same step (nil when we now own it).
-- SET NX GET needs Redis >= 7.0.
-- KEYS[1] key; ARGV[1] our CONSUMING value; ARGV[2] ttl in ms.
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'GET', 'PX', ARGV[2])
