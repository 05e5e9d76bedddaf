-- A waiter of a fair lock gave up (its wait ran out, its future was dropped, or the acquire
-- failed): remove its queue entry at once, take its link out of the deadline chain (see
-- fair_acquire.lua) as a Redisson waiter that gives up does, and if that lets the next waiter
-- take a free lock, wake that waiter.
-- KEYS: as fair_force_unlock.lua. ARGV: the leaving owner id, wake message, publish, W ms.
-- Returns 1 when the entry was removed, 0 when there was none. Keys of unexpected types are
-- left alone.
local publish = publish_command(ARGV[3])
acl_check({'lindex', 'lpop', 'lrange', 'lrem', 'time', 'type', 'zincrby', 'zrem',
    'zscore'}, publish)
local queue_type = key_type(KEYS[2])
local deadlines_type = key_type(KEYS[3])
if (queue_type ~= 'none' and queue_type ~= 'list')
    or (deadlines_type ~= 'none' and deadlines_type ~= 'zset') then
    return 0
end
local wait = tonumber(ARGV[4])
if not wait or wait <= 0 then
    return redis.error_reply('ERR the thread wait time must be a positive number of ms')
end
local ids = redis.call('lrange', KEYS[2], 0, -1)
local was_head = ids[1] == ARGV[1]
lower_behind(ids, KEYS[3], ARGV[1], wait)
local removed = redis.call('lrem', KEYS[2], 0, ARGV[1]) + redis.call('zrem', KEYS[3], ARGV[1])
if removed == 0 then
    return 0
end
if not was_head or key_type(KEYS[1]) ~= 'none' then
    return 1
end
-- The lock is free and the leaver was first: wake the next live waiter.
wake_head(KEYS[2], KEYS[3], KEYS[4], publish, ARGV[2])
return 1
