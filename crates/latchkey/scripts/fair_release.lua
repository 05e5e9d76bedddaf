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

local function wake_head()
    if not queue_ok then
        return
    end
    local now = now_ms()
    while true do
        local head = redis.call('lindex', KEYS[2], 0)
        if not head then
            return
        end
        local deadline = tonumber(redis.call('zscore', KEYS[3], head))
        if deadline and deadline > now then
            notify(publish, KEYS[4] .. ':' .. head, ARGV[1])
            return
        end
        redis.call('lpop', KEYS[2])
        redis.call('zrem', KEYS[3], head)
    end
end

if lock_type == 'none' then
    -- The lock is gone (expired or forced): the head may take it, whoever asked.
    wake_head()
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
wake_head()
return 0
