-- Acquire or re-enter a reentrant lock (Redisson's hash lock, plus a fencing token).
-- KEYS[1]  the lock: a hash {holder: count, "#token": token}
-- KEYS[2]  the key's token counter (survives the lock; lost only if Redis loses it)
-- ARGV[1]  holder id
-- ARGV[2]  lease in milliseconds
-- Returns {1, token} when acquired or re-entered, {0, pttl} when held by another.
if redis.call('exists', KEYS[1]) == 0 then
  local token = redis.call('incr', KEYS[2])
  redis.call('hset', KEYS[1], ARGV[1], 1, '#token', token)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, token}
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('hget', KEYS[1], '#token'))}
end
return {0, redis.call('pttl', KEYS[1])}
