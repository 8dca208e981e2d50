-- Acquire or re-enter a reentrant lock (Redisson's hash lock, plus a fencing token).
--
-- KEYS[1]  the lock: a hash {holder: count, "#token": token}
-- KEYS[2]  the key's last token (a plain string key; survives the lock)
-- ARGV[1]  holder id
-- ARGV[2]  lease in milliseconds
--
-- Returns {1, token} when acquired or re-entered, {0, pttl} when held by another.
--
-- The token is max(last token + 1, the server's clock in microseconds): it grows by
-- one per acquisition like a counter, and when Redis loses the counter (restarted
-- empty, or failed over to a replica that missed the last increments) the clock is
-- still ahead of every token handed out before, so the next holder is not refused by
-- a fence that saw those tokens. A clock set back across a data loss can only delay
-- the next sale (the fence refuses tokens it has outgrown); it never admits a stale
-- holder, because the resource, not Redis, compares tokens.
if redis.call('exists', KEYS[1]) == 0 then
  local now = redis.call('time')
  local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local token = math.max(tonumber(redis.call('get', KEYS[2]) or '0') + 1, clock)
  -- %.0f: a Lua number prints as 1.7e+15 otherwise; tokens stay below 2^53.
  token = string.format('%.0f', token)
  redis.call('set', KEYS[2], token)
  redis.call('hset', KEYS[1], ARGV[1], 1, '#token', token)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tonumber(token)}
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('hget', KEYS[1], '#token'))}
end
return {0, redis.call('pttl', KEYS[1])}
