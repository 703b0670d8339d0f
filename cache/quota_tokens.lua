-- Adds ARGV[1] tokens to a seeded counter; an unseeded one (or none) is
-- left alone: its seed will read the tokens from the store.
if redis.call('HEXISTS', KEYS[1], 'seeded') == 1 then
  return redis.call('HINCRBY', KEYS[1], 'tokens', ARGV[1])
end
return 0
