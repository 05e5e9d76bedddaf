-- Offer items to a delayed queue: each goes to the delayed zset scored by its due time, or
-- straight to the ready list when it is already due.
-- The delay channel gets the due time when an offered item becomes the earliest, the ready
-- channel the number of ids pushed. ARGV: 'in' (the times are delays in microseconds from the
-- server's TIME) or 'at' (due times), then a triple per item: id, time, payload; last, publish.
-- Returns {pushed to the ready list, added to the delayed zset, server time in ms}. Key types
-- and ids are checked before the first write: a wrong type or an id in use changes nothing.
-- Due times round up to the next millisecond, so an item is never ready before its delay.
queue_keys('delayed', 'items', 'ready', 'delay_channel', 'ready_channel', 'due')
local publish = publish_command(ARGV[#ARGV])
acl_check({'hexists', 'hset', 'rpush', 'time', 'type', 'zadd', 'zrange'}, publish,
    {KEYS[4], KEYS[5]})
local mode = ARGV[1]
local count = (#ARGV - 2) / 3
if (mode ~= 'in' and mode ~= 'at') or count < 1 or count ~= math.floor(count) then
    return redis.error_reply('ERR delay_offer: expected a mode and id/time/payload triples')
end
for i = 0, count - 1 do
    local id = ARGV[2 + 3 * i]
    if not tonumber(ARGV[3 + 3 * i]) then
        return redis.error_reply('ERR delay_offer: bad time for item ' .. id)
    end
    if redis.call('hexists', KEYS[2], id) == 1 then
        return redis.error_reply('ERR delay_offer: item id ' .. id .. ' is already in use')
    end
end
local clock_us = now_us()
local now = math.floor(clock_us / 1000)
-- An item due now goes straight to the ready list, unless earlier items are overdue and still
-- wait for the transfer: then it queues behind them in the zset, so order by due time holds.
local head = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES')
local overdue = head[2] ~= nil and tonumber(head[2]) <= now
local ready = {}
local delayed = 0
local earliest = nil
for i = 0, count - 1 do
    local id = ARGV[2 + 3 * i]
    local time = tonumber(ARGV[3 + 3 * i])
    local due, is_due
    if mode == 'in' then
        due = math.ceil((clock_us + time) / 1000)
        -- Due at once only without a delay (the rounded-up due time is the next millisecond,
        -- which must not keep such an item waiting for a transfer).
        is_due = time <= 0
    else
        due = time
        is_due = due <= now
    end
    redis.call('hset', KEYS[2], id, ARGV[4 + 3 * i])
    redis.call('hset', KEYS[6], id, string.format('%d', due))
    if is_due and not overdue then
        ready[#ready + 1] = id
    else
        redis.call('zadd', KEYS[1], due, id)
        delayed = delayed + 1
        if earliest == nil or due < earliest then
            earliest = due
        end
    end
end
local step = 1000
for i = 1, #ready, step do
    redis.call('rpush', KEYS[3], unpack(ready, i, math.min(i + step - 1, #ready)))
end
if #ready > 0 then
    notify(publish, KEYS[5], #ready)
end
if earliest ~= nil then
    -- Tell the transfer agents when one of these items is now the earliest to come due, or
    -- when overdue items wait for them.
    local first = tonumber(redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES')[2])
    if overdue or first >= earliest then
        notify(publish, KEYS[4], string.format('%d', first))
    end
end
return {#ready, delayed, now}
