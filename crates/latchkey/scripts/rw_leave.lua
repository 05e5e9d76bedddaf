-- A writer waiting for a read-write lock gave up (its wait ran out, its future was dropped, or
-- the acquire failed): remove its pending mark at once, and if no live writer is pending any
-- more, tell the readers it held back.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  latchkey's pending writers (zset "<owner>:write" -> server ms)
-- KEYS[3]  the lock's channel: redisson_rwlock:{<name>}
-- ARGV[1]  the leaving writer's field "<owner>:write"
-- ARGV[2]  the message that lets every waiter retry ("1", Redisson's READ_UNLOCK_MESSAGE)
-- ARGV[3]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
--
-- Returns 1 when the mark was removed, 0 when there was none. A key of another type is left
-- alone.
local publish = publish_command(ARGV[3])
acl_check({'hget', 'time', 'type', 'zcard', 'zrem', 'zremrangebyscore'}, publish, {KEYS[3]})
if key_type(KEYS[2]) ~= 'zset' then
    return 0
end
if redis.call('zrem', KEYS[2], ARGV[1]) == 0 then
    return 0
end
local now = now_ms()
redis.call('zremrangebyscore', KEYS[2], '-inf', now)
if redis.call('zcard', KEYS[2]) == 0 then
    -- Readers held back by the mark may go, unless a writer holds the lock (its release tells
    -- everybody anyway).
    local lock_type = key_type(KEYS[1])
    if lock_type ~= 'hash' or redis.call('hget', KEYS[1], 'mode') ~= 'write' then
        notify(publish, KEYS[3], ARGV[2])
    end
end
return 1
