-- Delete a read-write lock whoever holds it (every hold, and the read lease keys), and wake
-- every waiter. KEYS: lock hash, channel (redisson_rwlock:{<name>}), the lock's lease prefix.
-- ARGV: the message that lets every waiter retry ("1", Redisson's READ_UNLOCK_MESSAGE), publish.
-- Returns 1 when a lock was deleted, 0 when there was none. A key of another type (or a hash
-- that is not a read-write lock) is refused.
local publish = publish_command(ARGV[2])
acl_check({'del', 'hget', 'hgetall', 'type'}, publish, {KEYS[2]})
if expect_type(KEYS[1], 'hash', 'lock key') == 'none' then
    return 0
end
rw_mode(KEYS[1])
local fields = redis.call('hgetall', KEYS[1])
for i = 1, #fields, 2 do
    local f, count = fields[i], tonumber(fields[i + 1])
    if f ~= 'mode' and count and string.sub(f, -6) ~= ':write' then
        for n = 1, count do
            local k = KEYS[3] .. ':' .. f .. ':rwlock_timeout:' .. n
            if key_type(k) == 'string' then
                redis.call('del', k)
            end
        end
    end
end
redis.call('del', KEYS[1])
notify(publish, KEYS[2], ARGV[1])
return 1
