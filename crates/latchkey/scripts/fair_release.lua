-- Release one hold of a fair lock (Redisson RedissonFairLock layout) and, when the lock is
-- freed, wake the head of the queue on its own channel.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the wait queue (list of owner ids, head first)
-- KEYS[3]  the waiters' deadlines (zset owner id -> server ms)
-- KEYS[4]  the wake channel prefix; the head listens on "<prefix>:<owner id>"
-- ARGV[1]  the wake message ("0", Redisson's UNLOCK_MESSAGE)
-- ARGV[2]  lease in milliseconds to keep when holds remain
-- ARGV[3]  owner id
-- ARGV[4]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
--
-- Returns -1 when the caller does not hold the lock (nothing of the lock changes), otherwise
-- the holds left: 0 means the key was deleted and the head waiter was told. Stale queue
-- entries are dropped first, so the message goes to a waiter that is still there. The queue
-- is left alone if its keys have unexpected types.
local publish = publish_command(ARGV[4])
acl_check({'del', 'hexists', 'hincrby', 'lindex', 'lpop', 'pexpire', 'time', 'type', 'zrem',
    'zscore'}, publish)
local lock_type = expect_type(KEYS[1], 'hash', 'lock key')
local queue_type = key_type(KEYS[2])
local deadlines_type = key_type(KEYS[3])
local queue_ok = (queue_type == 'none' or queue_type == 'list')
    and (deadlines_type == 'none' or deadlines_type == 'zset')

-- Wakes the head of the queue, unless its keys have unexpected types.
local function wake()
    if queue_ok then
        wake_head(KEYS[2], KEYS[3], KEYS[4], publish, ARGV[1])
    end
end

if lock_type == 'none' then
    -- The lock is gone (expired or forced): the head may take it, whoever asked.
    wake()
    return -1
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return -1
end
local holds = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if holds > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return holds
end
redis.call('del', KEYS[1])
wake()
return 0
