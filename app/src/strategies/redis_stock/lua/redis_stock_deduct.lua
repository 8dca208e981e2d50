-- redis-stock: sell an order from the Redis counters, all or nothing, in one atomic step.
--
-- KEYS[1]  the request's key (its fingerprint and sale, once sold)
-- KEYS[2]  the sales stream
-- KEYS[3]  the "reconciling after a Redis restart" flag (the set of persisters reconciling)
-- KEYS[4..] one counter hash per item, in product order: {stock, pending, epoch}
-- ARGV[1]  request id
-- ARGV[2]  fingerprint (of the request's body: a reused id with another body is refused)
-- ARGV[3]  seconds the request key lives
-- ARGV[4..] per item: product id, quantity (same order as KEYS[4..])
--
-- Returns one of
--   {"dup", stored}            this request id already sold: stored = fingerprint "\n" entry "\n" items
--   {"recovering"}             a reconciliation is running: sell nothing now
--   {"init", i}                item i's counter does not exist yet: initialise it from the database
--   {"short", i, available}    item i has fewer units than asked
--   {"ok", entry, items}       sold: entry = the stream entry id, items = "p:q:left:epoch,..."
local stored = redis.call('GET', KEYS[1])
if stored then
  return {'dup', stored}
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {'recovering'}
end
local n = #KEYS - 3
-- Stock and epoch in one call per item (each redis.call costs a conversion both ways
-- on top of the command: the script's own overhead is most of its time).
local epochs = {}
for i = 1, n do
  local counter = redis.call('HMGET', KEYS[i + 3], 'stock', 'epoch')
  local stock = counter[1]
  if not stock then
    return {'init', i}
  end
  if tonumber(stock) < tonumber(ARGV[3 + 2 * i]) then
    return {'short', i, stock}
  end
  epochs[i] = counter[2]
end
local items = {}
for i = 1, n do
  local key, product, quantity = KEYS[i + 3], ARGV[2 + 2 * i], tonumber(ARGV[3 + 2 * i])
  local left = redis.call('HINCRBY', key, 'stock', -quantity)
  redis.call('HINCRBY', key, 'pending', quantity)
  items[i] = product .. ':' .. quantity .. ':' .. left .. ':' .. epochs[i]
end
local sale = table.concat(items, ',')
local entry = redis.call('XADD', KEYS[2], '*', 'request_id', ARGV[1], 'hash', ARGV[2], 'items', sale)
redis.call('SET', KEYS[1], ARGV[2] .. '\n' .. entry .. '\n' .. sale, 'EX', ARGV[3])
return {'ok', entry, sale}
