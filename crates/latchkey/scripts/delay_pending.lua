-- Read the earliest items waiting in the delayed zset (read-only).
-- ARGV: the most items to return. Returns a flat array: id, due time, payload, per item in
-- due order.
acl_check({'hget', 'type', 'zrange'})
queue_keys('delayed', 'items')
local limit = tonumber(ARGV[1])
local out = {}
if limit < 1 then
    return out
end
local items = redis.call('zrange', KEYS[1], 0, limit - 1, 'WITHSCORES')
for i = 1, #items, 2 do
    local payload = redis.call('hget', KEYS[2], items[i])
    if payload then
        out[#out + 1] = items[i]
        out[#out + 1] = tonumber(items[i + 1])
        out[#out + 1] = payload
    end
end
return out
