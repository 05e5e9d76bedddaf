-- Delete a fair lock whoever holds it, and wake the head of its queue.
-- KEYS: lock hash, wait queue, deadlines, wake channel prefix. ARGV: wake message, publish.
-- Returns 1 when a lock was deleted, 0 when there was none. A lock key of another type is
-- refused; queue keys of other types are not touched.
local publish = publish_command(ARGV[2])
acl_check({'del', 'lindex', 'lpop', 'time', 'type', 'zrem', 'zscore'}, publish)
if expect_type(KEYS[1], 'hash', 'lock key') == 'none' then
    return 0
end
redis.call('del', KEYS[1])
local queue_type = key_type(KEYS[2])
local deadlines_type = key_type(KEYS[3])
if queue_type ~= 'list' or (deadlines_type ~= 'none' and deadlines_type ~= 'zset') then
    return 1
end
wake_head(KEYS[2], KEYS[3], KEYS[4], publish, ARGV[1])
return 1
