-- Register (or refresh) what a client is, for the tools that show who holds a lock.
-- Self-contained (no prelude).
--
-- KEYS[1]  latchkey_client:{<client id>}: a hash of host, pid, program, version (and name)
-- ARGV[1]  how long the registration lives, in ms
-- ARGV[2…] field, value, field, value…
--
-- HSET refuses a key of another type before anything is written; the first PEXPIRE, an ACL
-- that would let the hash be written but never expire.
redis.call('pexpire', KEYS[1], ARGV[1])
redis.call('hset', KEYS[1], unpack(ARGV, 2))
redis.call('pexpire', KEYS[1], ARGV[1])
return 1
