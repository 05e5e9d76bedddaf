-- Release the hold of a fair lock and wake the head of the queue on its own channel: it takes
-- the lock with its own acquire, as with Redisson's release.
-- KEYS: as fair_force_unlock.lua. ARGV: wake message ("0"), owner id, publish.
-- Returns -1 when the caller does not hold the lock (nothing of the lock changes), 0 when the
-- key was deleted and the head woken. Stale queue entries are dropped first, so the lock goes
-- to a waiter that is still there; the queue is left alone if its keys have unexpected types.
local publish = publish_command(ARGV[3])
acl_check({'del', 'hexists', 'lindex', 'lpop', 'time', 'type', 'zrem', 'zscore'}, publish)
local lock_type = expect_type(KEYS[1], 'hash', 'lock key')
local queue_type = key_type(KEYS[2])
local deadlines_type = key_type(KEYS[3])
local queue_ok = (queue_type == 'none' or queue_type == 'list')
    and (deadlines_type == 'none' or deadlines_type == 'zset')
local held = lock_type == 'hash' and redis.call('hexists', KEYS[1], ARGV[2]) == 1
if lock_type == 'hash' and not held then
    return -1
end
if held then
    redis.call('del', KEYS[1])
end
-- The lock is free (released now, or gone: expired or forced): the head may take it.
if queue_ok then
    wake_head(KEYS[2], KEYS[3], KEYS[4], publish, ARGV[1])
end
return held and 0 or -1
