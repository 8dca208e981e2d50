-- Compare-and-delete: release the minimal SET NX lock only if we set it.
--
-- GET then DEL from the client would race: the lock may expire and be taken by
-- another holder between the two commands, and we would delete theirs.
--
-- KEYS[1]  the lock key
-- ARGV[1]  our value (the holder id)
--
-- Returns 1 if deleted, 0 if not ours.
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
