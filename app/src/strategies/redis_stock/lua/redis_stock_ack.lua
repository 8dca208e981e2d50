-- redis-stock: after the persister's COMMIT, acknowledge the entries and take them out
-- of "pending", once per entry: by the call whose XDEL removed it (not XACK's answer: after
-- a failover an entry may be in the stream and in no consumer's list, its delivery lost).
--
-- KEYS[1]   the sales stream
-- KEYS[2..] one counter hash per item line below
-- ARGV[1]   the consumer group
-- ARGV[2..] per entry: entry id, number of items, give back (1: a late duplicate the
--           database already had: its units return to the counter), then per item:
--           quantity, epoch
local stream, group = KEYS[1], ARGV[1]
local a, k = 2, 2
while a <= #ARGV do
  local id, n, give_back = ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2] == '1'
  a = a + 3
  redis.call('XACK', stream, group, id)
  local first = redis.call('XDEL', stream, id) == 1
  for _ = 1, n do
    local key, quantity, epoch = KEYS[k], tonumber(ARGV[a]), ARGV[a + 1]
    k, a = k + 1, a + 2
    -- A counter of another epoch (restocked since) does not hold this sale.
    if first and redis.call('HGET', key, 'epoch') == epoch then
      redis.call('HINCRBY', key, 'pending', -quantity)
      if give_back then
        redis.call('HINCRBY', key, 'stock', quantity)
      end
    end
  end
end
return 1
