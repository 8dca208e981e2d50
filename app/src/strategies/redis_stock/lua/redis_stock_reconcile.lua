-- redis-stock: make a counter agree with the database again (after a Redis restart
-- that may have forgotten sales the database already has).
--
-- KEYS[1] the counter hash     ARGV[1] quantity in the database     ARGV[2] its epoch
-- What Redis may still sell is what the database has left minus what Redis sold and
-- the database has not recorded yet (pending). Returns the counter's change.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[2] then
  -- Restocked since: start the new epoch from the database's row.
  redis.call('HSET', KEYS[1], 'stock', ARGV[1], 'pending', 0, 'epoch', ARGV[2])
  return 0
end
local pending = tonumber(redis.call('HGET', KEYS[1], 'pending'))
local should = tonumber(ARGV[1]) - pending
local was = tonumber(redis.call('HGET', KEYS[1], 'stock'))
redis.call('HSET', KEYS[1], 'stock', should)
return should - was
