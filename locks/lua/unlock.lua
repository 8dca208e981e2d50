-- Release one level of a reentrant lock; only its holder may.
--
-- KEYS[1]  the lock hash
-- ARGV[1]  holder id
-- ARGV[2]  the channel to announce a full release on (waiters subscribe to it)
-- ARGV[3]  how to announce it: 'publish', or 'spublish' on a Redis Cluster
--
-- Returns -1 if ARGV[1] does not hold the lock, else the holds left (0 = released).
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local left = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if left > 0 then
  return left
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], ARGV[2], ARGV[1])
return 0
