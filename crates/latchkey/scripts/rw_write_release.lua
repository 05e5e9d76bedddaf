-- Release one write hold of a read-write lock (Redisson RReadWriteLock layout).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel: redisson_rwlock:{<name>}
-- KEYS[3]  the lease prefix of the lock, "{<name>}" (read lease keys are
--          "<prefix>:<reader>:rwlock_timeout:<i>")
-- ARGV[1]  the message published when the write lock goes ("1", Redisson's
--          READ_UNLOCK_MESSAGE: every waiter may retry, all readers can go)
-- ARGV[2]  lease in milliseconds to keep when write holds remain
-- ARGV[3]  the caller's write field "<owner>:write"
-- ARGV[4]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
--
-- Returns -1 when the caller does not hold the write lock (nothing changes), otherwise the
-- write holds left. When the last write hold goes and the holder still has read holds (a
-- downgrade), the lock turns to read mode and waiting readers are told; otherwise the key is
-- deleted and every waiter is told.
local publish = publish_command(ARGV[4])
acl_check({'del', 'hdel', 'hexists', 'hget', 'hgetall', 'hincrby', 'hlen', 'hset', 'pexpire',
    'pttl', 'type'}, publish, {KEYS[2]})
if expect_type(KEYS[1], 'hash', 'lock key') == 'none' then
    return -1
end
local mode = rw_mode(KEYS[1])
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return -1
end

local holds = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if holds > 0 then
    redis.call('pexpire', KEYS[1], math.max(tonumber(ARGV[2]), reap(KEYS[1], KEYS[3])))
    return holds
end
redis.call('hdel', KEYS[1], ARGV[3])
local longest = reap(KEYS[1], KEYS[3])
if redis.call('hlen', KEYS[1]) <= 1 then
    redis.call('del', KEYS[1])
else
    -- The holder keeps read holds (it downgraded): readers may join it now.
    redis.call('hset', KEYS[1], 'mode', 'read')
    if longest > 0 then
        redis.call('pexpire', KEYS[1], longest)
    end
end
notify(publish, KEYS[2], ARGV[1])
return 0
