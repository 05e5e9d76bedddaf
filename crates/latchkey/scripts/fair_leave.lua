-- A waiter of a fair lock gave up (its wait ran out, its future was dropped, or the acquire
-- failed): remove its queue entry at once, lower the deadline of every entry behind it by the
-- thread wait time (it takes its link out of the deadline chain, as a Redisson waiter that gives
-- up does; see fair_acquire.lua), and if that lets the next waiter take a free lock, wake that
-- waiter.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the wait queue (list of owner ids, head first)
-- KEYS[3]  the waiters' deadlines (zset owner id -> server ms)
-- KEYS[4]  the wake channel prefix; a waiter listens on "<prefix>:<owner id>"
-- ARGV[1]  the leaving owner id
-- ARGV[2]  the wake message ("0")
-- ARGV[3]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
-- ARGV[4]  the thread wait time W in ms (Redisson's threadWaitTime)
--
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
local behind = false
for _, id in ipairs(ids) do
    if behind then
        if redis.call('zscore', KEYS[3], id) then
            redis.call('zincrby', KEYS[3], -wait, id)
        end
    elseif id == ARGV[1] then
        behind = true
    end
end
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
