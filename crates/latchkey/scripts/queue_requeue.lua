-- Give an item back: a delivery released without acknowledgement, or an item popped by a
-- `take` whose caller went away before it could be handed over.
-- ARGV: 'claimed' or 'popped', the item id, for 'claimed' the attempt number of the delivery
-- being released (nothing happens unless that delivery still holds the item: not acknowledged,
-- not timed out and claimed again) or for 'popped' the payload `pop` had removed; the delay in
-- microseconds before the item is ready again (0: at once, at the head of the ready list; with
-- a delay the item's due time becomes the new one); publish; for 'popped' the item's due time,
-- which `pop` had removed, or -1.
-- Returns 1 when the item was put back, 0 when there was nothing to do.
queue_keys('ready', 'items', 'unacked', 'attempts', 'delayed', 'ready_channel',
    'delay_channel', 'due')
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
