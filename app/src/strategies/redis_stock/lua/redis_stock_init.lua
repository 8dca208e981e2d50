-- redis-stock: create a product's counter from the database's row, unless it exists.
--
-- KEYS[1]  the counter hash
-- ARGV[1]  quantity in the database
-- ARGV[2]  its epoch
--
-- Returns 1 if it created the counter, 0 if another request had already.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'stock', ARGV[1], 'pending', 0, 'epoch', ARGV[2])
return 1
