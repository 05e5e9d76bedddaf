-- Extend the visibility timeout of a delivery that still holds its item.
--
-- KEYS[1]  the unacked zset
-- KEYS[2]  the attempt hash
-- ARGV[1]  the item id
-- ARGV[2]  the attempt number of the delivery
-- ARGV[3]  the new visibility timeout in ms, from now (server clock)
--
-- Returns 1 when extended, 0 when the delivery no longer holds the item (acknowledged,
-- released, or timed out and put back or claimed again).
acl_check({'hget', 'time', 'type', 'zadd', 'zscore'})
local function check(key, want, what)
    local t = redis.call('type', key)['ok']
    if t ~= 'none' and t ~= want then
        return redis.error_reply('WRONGTYPE ' .. what .. ' holds a ' .. t .. ', not a ' .. want)
    end
    return nil
end
local err = check(KEYS[1], 'zset', 'the unacked zset')
    or check(KEYS[2], 'hash', 'the attempt hash')
if err then return err end

if redis.call('hget', KEYS[2], ARGV[1]) ~= ARGV[2] or redis.call('zscore', KEYS[1], ARGV[1]) == false then
    return 0
end
local now = redis.call('time')
-- Rounded up, so a deadline never comes before the full timeout has passed.
local now_ms = math.ceil((tonumber(now[1]) * 1000000 + tonumber(now[2])) / 1000)
redis.call('zadd', KEYS[1], 'XX', now_ms + tonumber(ARGV[3]), ARGV[1])
return 1
