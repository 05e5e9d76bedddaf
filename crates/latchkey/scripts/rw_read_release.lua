-- Release one read hold of a read-write lock (Redisson RReadWriteLock layout).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel: redisson_rwlock:{<name>}
-- KEYS[3]  the caller's read lease prefix "{<name>}:<owner>:rwlock_timeout"
-- KEYS[4]  the lease prefix of the lock, "{<name>}" (read lease keys are
--          "<prefix>:<reader>:rwlock_timeout:<i>")
-- ARGV[1]  the message published when the lock is freed ("0", Redisson's UNLOCK_MESSAGE, as
--          Redisson's read unlock publishes)
-- ARGV[2]  lease in milliseconds to keep on the caller's remaining read holds
-- ARGV[3]  the caller's read field "<owner>"
-- ARGV[4]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
--
-- Returns -1 when the caller holds no read hold (nothing changes), otherwise the caller's read
-- holds left. The lock's TTL becomes the longest lease left among live holds; reader fields
-- whose leases all ran out (crashed readers) are dropped; when no hold is left the key is
-- deleted and the waiters are told.
local publish = publish_command(ARGV[4])
acl_check({'del', 'hdel', 'hget', 'hgetall', 'hlen', 'hset', 'pexpire', 'pttl', 'set',
    'type'}, publish, {KEYS[2]})
if expect_type(KEYS[1], 'hash', 'lock key') == 'none' then
    return -1
end
local mode = rw_mode(KEYS[1])
local count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
if not count or count < 1 then
    return -1
end
for n = 1, count do
    expect_type(KEYS[3] .. ':' .. n, 'string', 'the read lease key')
end

redis.call('del', KEYS[3] .. ':' .. count)
count = count - 1
if count == 0 then
    redis.call('hdel', KEYS[1], ARGV[3])
else
    redis.call('hset', KEYS[1], ARGV[3], count)
    for n = 1, count do
        redis.call('set', KEYS[3] .. ':' .. n, 1, 'PX', ARGV[2])
    end
end
local longest = reap(KEYS[1], KEYS[4])
if redis.call('hlen', KEYS[1]) <= 1 then
    redis.call('del', KEYS[1])
    notify(publish, KEYS[2], ARGV[1])
    return count
end
if mode == 'read' and longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
end
return count
