-- Release the write hold of an owner of a read-write lock.
-- KEYS: lock hash, channel, the lock's lease prefix.
-- ARGV: "1" (Redisson's READ_UNLOCK_MESSAGE: every waiter may retry, all readers can go), the
-- caller's write field, publish.
-- Returns -1 when the caller does not hold the write lock (nothing changes), otherwise 0. When
-- the holder still has a read hold (a downgrade), the lock turns to read mode; otherwise the
-- key is deleted. Every waiter is told.
local publish = publish_command(ARGV[3])
acl_check({'del', 'hdel', 'hexists', 'hget', 'hgetall', 'hlen', 'hset', 'pexpire', 'pttl',
    'type'}, publish, {KEYS[2]})
if expect_type(KEYS[1], 'hash', 'lock key') == 'none' then
    return -1
end
local mode = rw_mode(KEYS[1])
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return -1
end
redis.call('hdel', KEYS[1], ARGV[2])
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
