-- Give an item back: a delivery released without acknowledgement, or an item popped by a
-- `take` whose caller went away before it could be handed over.
--
-- KEYS[1]  the ready list
-- KEYS[2]  the item hash
-- KEYS[3]  the unacked zset
-- KEYS[4]  the attempt hash
-- KEYS[5]  the delayed zset
-- KEYS[6]  the ready channel
-- KEYS[7]  the delay channel
-- KEYS[8]  the due hash: item id -> due time (ms since the epoch)
-- ARGV[1]  'claimed': ARGV[3] is the attempt number of the delivery being released; nothing
--          happens unless that delivery still holds the item (not acknowledged, not timed out
--          and claimed again);
--          'popped': ARGV[3] is the payload, which `pop` had removed
-- ARGV[2]  the item id
-- ARGV[4]  delay in microseconds before the item is ready again (0: at once, at the head of
--          the ready list); with a delay the item's due time becomes the new one
-- ARGV[6]  'popped': the item's due time (ms since the epoch), which `pop` had removed, or -1
--
-- Returns 1 when the item was put back, 0 when there was nothing to do.
expect_type(KEYS[1], 'list', 'the ready list')
expect_type(KEYS[2], 'hash', 'the item hash')
expect_type(KEYS[3], 'zset', 'the unacked zset')
expect_type(KEYS[4], 'hash', 'the attempt hash')
expect_type(KEYS[5], 'zset', 'the delayed zset')
expect_type(KEYS[8], 'hash', 'the due hash')

-- ARGV[5]: the publish command, "publish" or "spublish" (cluster).
local publish = publish_command(ARGV[5])
acl_check({'hexists', 'hget', 'hset', 'lpush', 'time', 'type', 'zadd', 'zrange', 'zrem',
    'zscore'}, publish, {KEYS[6], KEYS[7]})
local id = ARGV[2]
local delay = tonumber(ARGV[4])
if delay == nil or delay < 0 then
    return redis.error_reply('ERR queue_requeue: bad delay')
end
if ARGV[1] == 'claimed' then
    if redis.call('hget', KEYS[4], id) ~= ARGV[3] or redis.call('zscore', KEYS[3], id) == false
        or redis.call('hexists', KEYS[2], id) == 0 then
        return 0
    end
    redis.call('zrem', KEYS[3], id)
elseif ARGV[1] == 'popped' then
    if redis.call('hexists', KEYS[2], id) == 1 then
        return 0
    end
    redis.call('hset', KEYS[2], id, ARGV[3])
    local due = tonumber(ARGV[6])
    if due ~= nil and due >= 0 then
        redis.call('hset', KEYS[8], id, string.format('%d', due))
    end
else
    return redis.error_reply('ERR queue_requeue: unknown mode ' .. tostring(ARGV[1]))
end

if delay == 0 then
    redis.call('lpush', KEYS[1], id)
    notify(publish, KEYS[6], 1)
    return 1
end
local due = math.ceil((now_us() + delay) / 1000)
redis.call('zadd', KEYS[5], due, id)
redis.call('hset', KEYS[8], id, string.format('%d', due))
local first = redis.call('zrange', KEYS[5], 0, 0, 'WITHSCORES')
if tonumber(first[2]) >= due then
    notify(publish, KEYS[7], string.format('%d', due))
end
return 1
