-- redis-stock: make a counter agree with the database again (after a Redis restart or a
-- failover that may have forgotten sales the database already has).
--
-- KEYS[1]  the counter hash
-- ARGV[1]  quantity in the database
-- ARGV[2]  its epoch
--
-- Redis may sell at most what the database has left minus what Redis sold and it has not
-- recorded yet (pending), and never more than the counter had (a shard sells a part).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[2] then
  -- Restocked since: the next sale starts the new epoch from the database's row.
  redis.call('DEL', KEYS[1])
  return 0
end
local pending = tonumber(redis.call('HGET', KEYS[1], 'pending'))
local was = tonumber(redis.call('HGET', KEYS[1], 'stock'))
local should = math.min(was, tonumber(ARGV[1]) - pending)
redis.call('HSET', KEYS[1], 'stock', should)
return should - was
