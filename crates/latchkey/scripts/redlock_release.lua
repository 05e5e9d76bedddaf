-- RedLock: release the lock on one node if the owner holds it, and wake its waiters.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel: redisson_lock__channel:{<name>}
-- ARGV[1]  owner field
-- ARGV[2]  the unlock message ("0", Redisson's UNLOCK_MESSAGE)
-- ARGV[3]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
--
-- Returns 1 when the owner's hold was deleted, 0 when it did not hold the lock on this node
-- (nothing changes then: another owner's lock is untouched).
local publish = ARGV[3]
if publish ~= 'publish' and publish ~= 'spublish' then
    return redis.error_reply('ERR the publish command must be publish or spublish')
end
acl_check({'del', 'hexists', 'type'}, publish, {KEYS[2]})
-- HEXISTS fails on a key of another type before anything is written (0 for a missing key).
local mine = wrongtype_only(redis.pcall('hexists', KEYS[1], ARGV[1]))
if type(mine) == 'table' then
    local found = redis.call('type', KEYS[1])['ok']
    return redis.error_reply('WRONGTYPE the lock key holds a ' .. found .. ', not a hash')
end
if mine == 0 then
    return 0
end
redis.call('del', KEYS[1])
redis.call(publish, KEYS[2], ARGV[2])
return 1
