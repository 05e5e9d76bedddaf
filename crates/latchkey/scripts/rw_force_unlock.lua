-- Delete a read-write lock whoever holds it (every read and write hold, and the read lease
-- keys), and wake every waiter.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel: redisson_rwlock:{<name>}
-- KEYS[3]  the lease prefix of the lock, "{<name>}" (read lease keys are
--          "<prefix>:<reader>:rwlock_timeout:<i>")
-- ARGV[1]  the message that lets every waiter retry ("1", Redisson's READ_UNLOCK_MESSAGE)
-- ARGV[2]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
--
-- Returns 1 when a lock was deleted, 0 when there was none. A key of another type (or a hash
-- that is not a read-write lock) is an error and is left alone.
local publish = ARGV[2]
if publish ~= 'publish' and publish ~= 'spublish' then
    return redis.error_reply('ERR the publish command must be publish or spublish')
end
acl_check({'del', 'hget', 'hgetall', 'type'}, publish, {KEYS[2]})
local lock_type = redis.call('type', KEYS[1])['ok']
if lock_type == 'none' then
    return 0
end
if lock_type ~= 'hash' then
    return redis.error_reply('WRONGTYPE lock key holds a ' .. lock_type .. ', not a hash')
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode ~= 'read' and mode ~= 'write' then
    return redis.error_reply('WRONGTYPE the key holds a hash that is not a read-write lock')
end
local fields = redis.call('hgetall', KEYS[1])
for i = 1, #fields, 2 do
    local f, count = fields[i], tonumber(fields[i + 1])
    if f ~= 'mode' and count and string.sub(f, -6) ~= ':write' then
        for n = 1, count do
            local k = KEYS[3] .. ':' .. f .. ':rwlock_timeout:' .. n
            if redis.call('type', k)['ok'] == 'string' then
                redis.call('del', k)
            end
        end
    end
end
redis.call('del', KEYS[1])
redis.call(publish, KEYS[2], ARGV[1])
return 1
