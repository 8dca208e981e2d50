-- Compare-and-delete: release the minimal SET NX lock only if we set it.
--
-- GET then DEL from the client would race: the lock may expire and be taken by
-- another holder between the two commands, and we would delete theirs.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the value our SET stored (the holder id; RedLock's random value)
--
-- Returns 1 if deleted, 0 if not ours.
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
