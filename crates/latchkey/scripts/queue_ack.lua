-- Acknowledge a delivery: the item is done and is never delivered again.
--
-- KEYS[1]  the unacked zset
-- KEYS[2]  the item hash
-- KEYS[3]  the attempt hash
-- ARGV[1]  the item id
--
-- Returns 1 when this call finished the item, 0 when it was already finished (acknowledged
-- through another delivery of it, or removed). Any delivery of the item may acknowledge it, even
-- one whose visibility timeout ran out: the work is done either way. An id left in the ready
-- list is skipped by the next take.
acl_check({'hdel', 'type', 'zrem'})
local function check(key, want, what)
    local t = redis.call('type', key)['ok']
    if t ~= 'none' and t ~= want then
        return redis.error_reply('WRONGTYPE ' .. what .. ' holds a ' .. t .. ', not a ' .. want)
    end
    return nil
end
local err = check(KEYS[1], 'zset', 'the unacked zset')
    or check(KEYS[2], 'hash', 'the item hash')
    or check(KEYS[3], 'hash', 'the attempt hash')
if err then return err end

redis.call('zrem', KEYS[1], ARGV[1])
redis.call('hdel', KEYS[3], ARGV[1])
return redis.call('hdel', KEYS[2], ARGV[1])
