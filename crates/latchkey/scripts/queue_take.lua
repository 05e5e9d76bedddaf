-- Take the item at the head of the ready list.
-- ARGV: 'pop' (remove the item for good: at most once) or 'claim' (keep it, invisible until
-- acknowledged or until the deadline: at least once), the visibility ms.
-- Returns false (nil) when the ready list is empty; {id, payload, due} ('pop') or
-- {id, payload, attempt, due} ('claim'), due being -1 for an item offered without one (by an
-- older latchkey); {} when it skipped ids of items acknowledged or removed meanwhile and the
-- caller should simply call again.
acl_check({'hdel', 'hget', 'hincrby', 'lpop', 'time', 'type', 'zadd'})
queue_keys('ready', 'items', 'unacked', 'attempts', 'due')
local claim = ARGV[1] == 'claim'
local visibility = tonumber(ARGV[2])
if not claim and ARGV[1] ~= 'pop' then
    return redis.error_reply('ERR queue_take: unknown mode ' .. tostring(ARGV[1]))
end
if claim and (visibility == nil or visibility < 1) then
    return redis.error_reply('ERR queue_take: bad visibility timeout')
end
for _ = 1, 100 do
    local id = redis.call('lpop', KEYS[1])
    if not id then
        return false
    end
    local payload = redis.call('hget', KEYS[2], id)
    if payload then
        local due = tonumber(redis.call('hget', KEYS[5], id)) or -1
        if claim then
            -- Rounded up, so a deadline never comes before the full timeout has passed.
            redis.call('zadd', KEYS[3], now_ms(true) + visibility, id)
            local attempt = redis.call('hincrby', KEYS[4], id, 1)
            return {id, payload, attempt, due}
        end
        redis.call('hdel', KEYS[2], id)
        redis.call('hdel', KEYS[4], id)
        redis.call('hdel', KEYS[5], id)
        return {id, payload, due}
    end
    -- No payload: the item was acknowledged (by an earlier delivery) after it had been put
    -- back; its id is a leftover. Drop it and look at the next one.
end
return {}
