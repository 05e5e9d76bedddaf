-- A writer waiting for a read-write lock gave up (its wait ran out, its future was dropped, or
-- the acquire failed): remove its pending mark at once, and if no live writer is pending any
-- more, tell the readers it held back.
-- KEYS: lock hash, pending writers, channel. ARGV: the leaving write field, "1", publish.
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
