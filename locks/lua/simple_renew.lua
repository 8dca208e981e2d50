-- Compare-and-extend for the minimal SET NX lock.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the value our SET stored (the holder id; RedLock's random value)
-- ARGV[2]  lease in milliseconds
--
-- Returns 1 if renewed, 0 if not ours.
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
