-- Extend the lease, only if ARGV[1] still holds the lock.
--
-- KEYS[1]  the lock hash
-- ARGV[1]  holder id
-- ARGV[2]  lease in milliseconds
--
-- Returns 1 if renewed, 0 if ARGV[1] does not hold it (expired, taken or deleted).
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
