-- Delete a fair lock whoever holds it, and wake the head of its queue.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the wait queue (list of owner ids, head first)
-- KEYS[3]  the waiters' deadlines (zset owner id -> server ms)
-- KEYS[4]  the wake channel prefix; a waiter listens on "<prefix>:<owner id>"
-- ARGV[1]  the wake message ("0")
-- ARGV[2]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
--
-- Returns 1 when a lock was deleted, 0 when there was none. A lock key of another type is an
-- error and is left alone; queue keys of other types are not touched.
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
