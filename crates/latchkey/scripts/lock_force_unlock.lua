-- Delete a lock whoever holds it, and wake its waiters.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel
-- ARGV[1]  the unlock message ("0")
-- ARGV[2]  the publish command: "publish", or "spublish" on a cluster
--
-- Returns 1 when a lock was deleted, 0 when there was none. A key of another type is an
-- error and is left alone: force-unlock never deletes data that is not a lock.
local publish = ARGV[2]
if publish ~= 'publish' and publish ~= 'spublish' then
    return redis.error_reply('ERR the publish command must be publish or spublish')
end
acl_check({'del', 'type'}, publish, {KEYS[2]})
local lock_type = redis.call('type', KEYS[1])['ok']
if lock_type == 'none' then
    return 0
end
if lock_type ~= 'hash' then
    return redis.error_reply('WRONGTYPE lock key holds a ' .. lock_type .. ', not a hash')
end
redis.call('del', KEYS[1])
redis.call(publish, KEYS[2], ARGV[1])
return 1
