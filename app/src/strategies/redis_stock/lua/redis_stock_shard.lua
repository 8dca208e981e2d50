-- redis-stock on a Redis Cluster: one shard of a product's stock (its counter hash,
-- with `gen` counting freezes: odd while frozen, and `held`, `owner`, `until`).
--
-- ARGV[1] the operation:
--   read    KEYS: counter, the request's key, the reconciling flag
--           -> {"dup"} | {"recovering"} | {"missing"} | {"ok", stock, pending, gen, epoch}
--   freeze  KEYS: counter   ARGV: owner, milliseconds the freeze lasts, epoch
--           -> {"ok", units held} | {"busy"} (another's freeze) | {"gone"} (missing,
--           or another epoch)
--   thaw    KEYS: counter   ARGV: owner, the units it sells from now on
--           -> {"ok"} | {"lost"} (the freeze expired and the shard took its units back)
--   retire  KEYS: counter   ARGV: the database's epoch
--           -> 1 if the counter was of an older epoch and is gone (a restock), else 0:
--           never a counter of this epoch, which may have sold already
local key, op = KEYS[1], ARGV[1]
if op == 'retire' then
  local epoch = redis.call('HGET', key, 'epoch')
  if epoch and tonumber(epoch) < tonumber(ARGV[2]) then
    return redis.call('DEL', key)
  end
  return 0
end
local c = redis.call('HMGET', key, 'stock', 'pending', 'gen', 'epoch', 'held', 'owner', 'until')
if op == 'read' then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    return {'dup'}
  end
  if redis.call('EXISTS', KEYS[3]) == 1 then
    return {'recovering'}
  end
end
if not c[1] then
  return {op == 'read' and 'missing' or 'gone'}
end
local gen = tonumber(c[3] or '0')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- A freeze whose merger died (it outlived `until`): the shard takes its units back.
if gen % 2 == 1 and tonumber(c[7]) <= now and op ~= 'thaw' then
  gen = gen + 1
  redis.call('HSET', key, 'stock', c[5], 'gen', gen)
  c[1] = c[5]
end
if op == 'read' then
  return {'ok', c[1], c[2], gen, c[4]}
elseif op == 'freeze' then
  if c[4] ~= ARGV[4] then
    return {'gone'}
  end
  if gen % 2 == 1 then
    return {'busy'}
  end
  redis.call('HSET', key, 'stock', 0, 'held', c[1], 'gen', gen + 1, 'owner', ARGV[2],
    'until', now + tonumber(ARGV[3]))
  return {'ok', c[1]}
end
if gen % 2 == 0 or c[6] ~= ARGV[2] then
  return {'lost'}
end
redis.call('HSET', key, 'stock', ARGV[3], 'gen', gen + 1)
redis.call('HDEL', key, 'held', 'owner', 'until')
return {'ok'}
