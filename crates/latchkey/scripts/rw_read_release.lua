-- Release the read hold of an owner of a read-write lock (Redisson RReadWriteLock layout). A
-- latchkey owner counts one read hold (its re-entries are its guards').
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel: redisson_rwlock:{<name>}
-- KEYS[3]  the caller's read lease prefix "{<name>}:<owner>:rwlock_timeout"
-- KEYS[4]  the lease prefix of the lock, "{<name>}" (read lease keys are
--          "<prefix>:<reader>:rwlock_timeout:<i>")
-- ARGV[1]  the message published when the lock is freed ("0", Redisson's UNLOCK_MESSAGE, as
--          Redisson's read unlock publishes)
-- ARGV[2]  the caller's read field "<owner>"
-- ARGV[3]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
--
-- Returns -1 when the caller holds no read hold (nothing changes), otherwise 0. The lock's
-- TTL becomes the longest lease left among live holds; reader fields
-- whose leases all ran out (crashed readers) are dropped; when no hold is left the key is
-- deleted and the waiters are told.
local publish = publish_command(ARGV[3])
acl_check({'del', 'hdel', 'hget', 'hgetall', 'hlen', 'pexpire', 'pttl', 'type'}, publish,
    {KEYS[2]})
if expect_type(KEYS[1], 'hash', 'lock key') == 'none' then
    return -1
end
local mode = rw_mode(KEYS[1])
local count = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
if not count or count < 1 then
    return -1
end
for n = 1, count do
    expect_type(KEYS[3] .. ':' .. n, 'string', 'the read lease key')
end
for n = 1, count do
    redis.call('del', KEYS[3] .. ':' .. n)
end
redis.call('hdel', KEYS[1], ARGV[2])
local longest = reap(KEYS[1], KEYS[4])
if redis.call('hlen', KEYS[1]) <= 1 then
    redis.call('del', KEYS[1])
    notify(publish, KEYS[2], ARGV[1])
    return 0
end
if mode == 'read' and longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
end
return 0
